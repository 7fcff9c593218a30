"""The place rule through the turn loop, on both backends (issue 35): a memory learned by
reflection in one place is in the prompt asked in another exactly when
:func:`core.rules.places.usable` says so (docs/privacy.md's table), for the profile, the
memory question's listing and recall alike; the count line only in the owner's DM."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from core.rules.places import usable
from core.types import Place
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import Harness, dm, harness, memories_reply, memory_lines, memory_text

ALICE = "slack:T1:UALICE"
DANA = "discord:4242"

SLACK: dict[str, Place] = {
    "slack DM": Place("slack", "dm", "T1", "D1"),
    "group DM": Place("slack", "group_dm", "T1", "G1"),
    "private channel": Place("slack", "private_channel", "T1", "C2"),
    "public channel": Place("slack", "public_channel", "T1", "C1"),
    "another public channel": Place("slack", "public_channel", "T1", "C3"),
    "another private channel": Place("slack", "private_channel", "T1", "C4"),
    "another workspace": Place("slack", "public_channel", "T2", "C9"),
    "Slack Connect channel": Place("slack", "public_channel", "connect-C7", "C7"),
}
DISCORD: dict[str, Place] = {
    "discord DM": Place("discord", "dm", None, "11"),
    "guild A": Place("discord", "public_channel", "100", "101"),
    "guild A other channel": Place("discord", "public_channel", "100", "102"),
    "guild A private": Place("discord", "private_channel", "100", "103"),
    "guild B": Place("discord", "public_channel", "200", "201"),
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=40) as f:
        yield f


def fact(name: str) -> str:
    return f"The user mentioned the code word {name.replace(' ', '')}."


def said(user: str, place: Place, text: str, n: int) -> object:
    shared = place.kind != "dm"
    return dm(
        user,
        text,
        origin="shared" if shared else "private",
        conversation_key=f"{place.platform}:{place.workspace}:{place.channel}:{n}",
        place=place,
        sent_at=datetime(2026, 11, 29, 12, n % 60, tzinfo=UTC),
    )


async def learn(h: Harness, fake: FakeAnthropic, user: str, places: dict[str, Place]) -> None:
    """One reflection per place, each learning that place's fact."""
    for n, (name, place) in enumerate(places.items()):
        fake.enqueue(memories_reply((fact(name), "fact", "general")), kind="extract")
        await h.say(said(user, place, f"remember the code word {name}", n))  # type: ignore[arg-type]
        await h.reflector.drain(10)


@pytest.mark.parametrize("question", ["what is my code word?", "what do you remember about me?"])
async def test_a_memory_is_used_exactly_where_the_rule_says(
    fake: FakeAnthropic, db_url: str, question: str
) -> None:
    async with harness(fake, db_url) as h:
        await learn(h, fake, ALICE, SLACK)
        await learn(h, fake, DANA, DISCORD)
        stored = {m.text: m.place for m in await h.service.list_memories(user_key=ALICE, limit=50)}
        assert stored == {fact(n): p for n, p in SLACK.items()}  # each where it was learned
        first = len(fake.requests_of("chat"))
        asked: list[tuple[str, str, dict[str, Place]]] = []
        for user, places in ((ALICE, SLACK), (DANA, DISCORD)):
            for n, (name, place) in enumerate(places.items()):
                await h.say(said(user, place, question, 100 + n))  # type: ignore[arg-type]
                asked.append((name, user, places))
        await h.reflector.drain(10)
    requests = fake.requests_of("chat")[first:]
    assert len(requests) == len(asked)
    for (where, _user, places), request in zip(asked, requests, strict=True):
        block = memory_text(request.body)
        shown = set(memory_lines(block))
        expected = {fact(n) for n, p in places.items() if usable(p, places[where])}
        assert shown == expected, where
        # The count of every note is said only where every note may be used.
        counted = re.search(r"\d+ notes? (?:is|are) stored", block) is not None
        assert counted == (places[where].kind == "dm"), where


async def test_the_operator_opt_in_keeps_its_meaning(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url, recall_private_in_channels=True) as h:
        await learn(h, fake, ALICE, {"slack DM": SLACK["slack DM"], "group DM": SLACK["group DM"]})
        await h.say(said(ALICE, SLACK["public channel"], "what is my code word?", 90))  # type: ignore[arg-type]
        await h.reflector.drain(10)
    shown = set(memory_lines(memory_text(fake.requests_of("chat")[-1].body)))
    assert shown == {fact("slack DM"), fact("group DM")}


async def test_a_private_channel_reflection_never_supersedes_what_it_cannot_see(
    fake: FakeAnthropic, db_url: str
) -> None:
    # The reflection in a public channel is shown only what that channel may use: a DM
    # memory is not among the candidates it may supersede (nor copy into the channel).
    async with harness(fake, db_url) as h:
        secret = await h.service.remember(user_key=ALICE, text="The user lives in Lisbon.")
        fake.enqueue(
            memories_reply(
                {
                    "text": "The user lives in Porto.",
                    "kind": "correction",
                    "category": "general",
                    "supersedes": [secret.id],
                }
            ),
            kind="extract",
        )
        await h.say(
            said(ALICE, SLACK["public channel"], "I live in Porto now, where do I live?", 1)
        )  # type: ignore[arg-type]
        await h.reflector.drain(10)
        extract = fake.requests_of("extract")[-1].body
        assert "Lisbon" not in str(extract["messages"])
        still = await h.store.get(user_key=ALICE, memory_id=secret.id)
        assert still is not None and still.active
