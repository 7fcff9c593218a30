"""The fake's token counting endpoint, the price table and the offline similarity rule."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import pytest

from core.evaluation.scoring import as_user, offline_score, terms
from core.model.claude import Usage
from core.model.prices import PRICES, PRICES_AS_OF, price_of
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic

LONG = "Stable instructions that are long enough to be cached. " * 100


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as f:
        yield f


async def test_count_tokens_equals_what_messages_counts(fake: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url)
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Volatile part ✓ with unicode."},
    ]
    messages: list[anthropic.types.MessageParam] = [
        {"role": "user", "content": "Hello there, this is the question."},
        {"role": "assistant", "content": [{"type": "text", "text": "An earlier answer."}]},
        {"role": "user", "content": "And a follow-up."},
    ]
    async with client:
        counted = await client.messages.count_tokens(
            model="claude-opus-4-8", system=system, messages=messages
        )
        for _ in range(2):  # the second call reads the cache: the total stays the same
            message = await client.messages.create(
                model="claude-opus-4-8", max_tokens=100, system=system, messages=messages
            )
            u = message.usage
            total = u.input_tokens + (u.cache_read_input_tokens or 0)
            assert total + (u.cache_creation_input_tokens or 0) == counted.input_tokens
        assert (u.cache_read_input_tokens or 0) > 0
    assert len(fake.count_requests) == 1 and fake.totals.requests == 2


async def test_count_tokens_refuses_like_messages(fake: FakeAnthropic) -> None:
    async with anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url, max_retries=0) as c:
        with pytest.raises(anthropic.BadRequestError):
            await c.messages.count_tokens(model="claude-opus-4-8", messages=[])
    async with (
        running_fake_anthropic(api_key="right") as strict,
        anthropic.AsyncAnthropic(api_key="wrong", base_url=strict.base_url, max_retries=0) as c,
    ):
        with pytest.raises(anthropic.AuthenticationError):
            await c.messages.count_tokens(
                model="claude-opus-4-8", messages=[{"role": "user", "content": "hi"}]
            )
    assert [r.status for r in fake.count_requests] == [400]


def test_price_table() -> None:
    assert PRICES_AS_OF.count("-") == 2
    haiku = price_of("claude-haiku-4-5-20251001")
    assert haiku is not None and haiku is PRICES["claude-haiku-4-5"]
    assert price_of("claude-unknown") is None and price_of("gpt-4-20240101") is None
    # 1M each: input $1, output $5, cache write 1.25 x, cache read 0.1 x.
    usage = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
    assert haiku.cost(usage) == pytest.approx(1 + 5 + 0.1 + 1.25)
    assert all(p.note for p in PRICES.values() if p.assumed)


def test_as_user_maps_the_persons_name_only() -> None:
    assert as_user("Caroline's dog is named Rex.", "Caroline") == "The user's dog is named Rex."
    assert as_user("Mel told Caroline about it.", "Caroline") == "Mel told the user about it."
    assert as_user("Carolineville is far.", "Caroline") == "Carolineville is far."
    assert as_user("", "Caroline") == "" and as_user("x", "") == "x"


def test_offline_rule() -> None:
    score = offline_score(
        name="Ada",
        observations=["Ada adopted a cat named Miso last spring.", "Ada runs marathons."],
        memories=[
            "The user adopted a cat called Miso in the spring.",
            "The user should try pottery.",
        ],
        new_memories=[
            "The user adopted a cat called Miso in the spring.",
            "The user should try pottery.",
        ],
        own_turns=["I adopted a cat named Miso last spring!"],
        other_turns=["You should try pottery, honestly."],
    )
    assert (score.observations, score.covered) == (2, 1)
    assert (score.new_memories, score.supported, score.from_other) == (2, 1, 1)
    assert terms("The user, Ada, likes tea", "Ada") == frozenset({"like", "tea"})
    empty = offline_score(
        name="Ada", observations=[], memories=[], new_memories=[], own_turns=[], other_turns=[]
    )
    assert empty.covered == empty.supported == 0
