"""Failures that say so: a message whose answer failed, was refused or was stopped is never
glued into the next question, never reflected on, and what its call cost is still counted.
Before: "What's a good name for a cat?\\n\\nclear\\n\\nSecond question: ..." in one user
message, three reflections each, a 401 retried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from core.chat.loop import STOPPED_MARK
from core.chat.prompt import history_messages
from core.errors import ModelError
from core.types import Turn
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    Reply,
    overloaded,
    running_fake_anthropic,
)
from tests.loop_helpers import Harness, dm, harness, memories_reply

ALICE = "cli:alice"
FIRST, SECOND = "What's a good name for a cat?", "Second question: and for a dog?"
REFUSED_KEY = Reply(
    status=401, error_type="authentication_error", error_message="invalid x-api-key"
)
BAD_REQUEST = Reply(status=400, error_type="invalid_request_error", error_message="bad")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as f:
        yield f


def last_user_message(fake: FakeAnthropic) -> str:
    messages = fake.requests_of("chat")[-1].body["messages"]
    assert messages[-1]["role"] == "user"
    content = messages[-1]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def every_text(fake: FakeAnthropic) -> str:
    return "\n".join(str(r.body) for r in fake.requests)


async def stop_after_first_delta(h: Harness, text: str) -> str:
    """What Ctrl-C in the terminal does: the reader closes the answer after one delta."""
    answer = h.loop.answer(dm(ALICE, text))
    first = await anext(answer)
    await answer.aclose()
    return first


async def cancel_mid_answer(h: Harness, text: str) -> None:
    """A task cancelled mid-answer (shutdown, a stop button)."""

    shown = asyncio.Event()

    async def consume() -> None:
        async for _ in h.loop.answer(dm(ALICE, text)):
            shown.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(shown.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("how", ["failed", "refused", "bad_request", "stopped", "cancelled"])
async def test_an_undelivered_answer_is_never_glued_nor_reflected_on(
    fake: FakeAnthropic, db_url: str, how: str
) -> None:
    async with harness(fake, db_url, anthropic_max_retries=0) as h:
        if how == "failed":
            fake.enqueue(overloaded(), kind="chat")
        elif how == "refused":
            fake.enqueue(REFUSED_KEY, kind="chat")
        elif how == "bad_request":
            fake.enqueue(BAD_REQUEST, kind="chat")
        else:
            fake.enqueue(
                Reply(text="Whiskers is a classic. " * 20, chunk_size=4, chunk_delay_s=0.01),
                kind="chat",
            )
        if how == "stopped":
            assert await stop_after_first_delta(h, FIRST)
        elif how == "cancelled":
            await cancel_mid_answer(h, FIRST)
        else:
            with pytest.raises(ModelError):
                await h.say(dm(ALICE, FIRST))
        await h.reflector.drain(10)
        assert not fake.requests_of("extract"), how  # never reflected on

        fake.enqueue("Rex.", kind="chat")
        fake.enqueue(memories_reply(), kind="extract")
        assert await h.say(dm(ALICE, SECOND)) == "Rex."
        await h.reflector.drain(10)
        assert last_user_message(fake) == SECOND, how  # not glued
        if how in ("stopped", "cancelled"):  # shown: kept apart, marked as cut
            messages = fake.requests_of("chat")[-1].body["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant", "user"]
            assert messages[0]["content"] == FIRST
            assert messages[1]["content"].endswith(STOPPED_MARK)
        else:  # nothing shown: left out
            assert FIRST not in str(fake.requests_of("chat")[-1].body["messages"])
        extracts = fake.requests_of("extract")
        assert len(extracts) == 1 and FIRST not in str(extracts[0].body), how  # SECOND's only


async def test_a_stopped_answer_counts_what_the_api_reported(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        fake.enqueue(Reply(text="word " * 200, chunk_size=4, chunk_delay_s=0.01), kind="chat")
        await stop_after_first_delta(h, FIRST)
        from datetime import timedelta

        rows = await h.store.usage_report(since=datetime.now(UTC) - timedelta(days=1), by="kind")
    assert [(r.key, r.calls) for r in rows] == [("chat", 1)]
    assert rows[0].input_tokens + rows[0].cache_creation_input_tokens > 0


@pytest.mark.parametrize("reply", [REFUSED_KEY, BAD_REQUEST], ids=["401", "400"])
async def test_reflection_does_not_retry_what_no_retry_fixes(
    fake: FakeAnthropic, db_url: str, reply: Reply
) -> None:
    async with harness(fake, db_url, reflection_max_attempts=3) as h:
        fake.enqueue("Noted.", kind="chat")
        fake.enqueue(reply, kind="extract", times=3)
        await h.say(dm(ALICE, "I use Neovim."))
        await h.reflector.drain(10)
    assert len(fake.requests_of("extract")) == 1


async def test_reflection_still_retries_what_may_pass(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url, reflection_max_attempts=3, anthropic_max_retries=0) as h:
        fake.enqueue("Noted.", kind="chat")
        fake.enqueue(overloaded(), kind="extract", times=2)
        fake.enqueue(memories_reply(), kind="extract")
        await h.say(dm(ALICE, "I use Neovim."))
        await h.reflector.drain(10)
    assert len(fake.requests_of("extract")) == 3


def test_history_keeps_other_peoples_messages_and_answered_ones() -> None:
    at = datetime(2026, 12, 1, tzinfo=UTC)

    def turn(i: int, role: str, text: str, **kw: object) -> Turn:
        return Turn(id=i, conversation_key="c", user_key=None if role == "assistant" else ALICE,
                    role=role, text=text, origin="shared", sent_at=at, **kw)  # type: ignore[arg-type]  # fmt: skip

    history = [
        turn(1, "user", "context from Bob", author="Bob"),  # read from the thread, no state
        turn(2, "user", "unanswered", reflection="off"),  # its answer failed
        turn(3, "user", "asked", reflection="done"),
        turn(4, "assistant", "answered", reply_to=3),
    ]
    messages = history_messages(history, "now", attribute=False, current_author=None)
    assert [m.content for m in messages] == ["context from Bob\n\nasked", "answered", "now"]
