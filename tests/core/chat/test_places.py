"""The place rule through the turn loop, on both backends (issue 35): a memory learned by
reflection in one place is in the prompt asked in another exactly when
:func:`core.rules.places.usable` says so (docs/privacy.md's table), for the profile, the
memory question's listing and recall alike; the count line only in the owner's DM."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from core.chat.loop import IncomingMessage
from core.rules.places import usable, usable_reaches
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


def said(user: str, place: Place, text: str, n: int) -> IncomingMessage:
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
        await h.say(said(user, place, f"remember the code word {name}", n))
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
                await h.say(said(user, place, question, 100 + n))
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
        await h.say(said(ALICE, SLACK["public channel"], "what is my code word?", 90))
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
        )
        await h.reflector.drain(10)
        extract = fake.requests_of("extract")[-1].body
        assert "Lisbon" not in str(extract["messages"])
        still = await h.store.get(user_key=ALICE, memory_id=secret.id)
        assert still is not None and still.active


TABS = "The user prefers tabs over spaces."


async def ask(
    h: Harness,
    fake: FakeAnthropic,
    user: str,
    place: Place,
    n: int,
    question: str = "tabs or spaces for me?",
) -> set[str]:
    """The memory lines of the prompt answering ``user``'s ``question`` in ``place``."""
    await h.say(said(user, place, question, n))
    await h.reflector.drain(10)
    return set(memory_lines(memory_text(fake.requests_of("chat")[-1].body)))


async def test_a_fact_said_again_in_a_wider_place_is_used_there_and_no_wider(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        for user, home in ((ALICE, SLACK["slack DM"]), (DANA, DISCORD["discord DM"])):
            fake.enqueue(memories_reply((TABS, "preference", "code")), kind="extract")
            await h.say(said(user, home, "I prefer tabs over spaces", 1))
            await h.reflector.drain(10)
        bob = "slack:T1:UBOB"
        await h.service.remember(user_key=bob, text=TABS)  # Bob's own, in his DM
        # Said again in a public channel: dedupe finds the DM twin.
        for user, there in ((ALICE, SLACK["public channel"]), (DANA, DISCORD["guild A"])):
            fake.enqueue(memories_reply((TABS, "preference", "code")), kind="extract")
            await h.say(said(user, there, "I prefer tabs over spaces, always", 2))
            await h.reflector.drain(10)
        [tabs] = await h.service.list_memories(user_key=ALICE, limit=10)
        assert tabs.text == TABS and tabs.place == SLACK["public channel"]  # one copy
        events = await h.store.history(user_key=ALICE, newest_first=True)
        assert (events[0].memory_id, events[0].event) == (tabs.id, "restored")
        # Used where it was said again and in that workspace's other public channels ...
        assert TABS in await ask(h, fake, ALICE, SLACK["public channel"], 3)
        assert TABS in await ask(h, fake, ALICE, SLACK["another public channel"], 4)
        assert TABS in await ask(h, fake, ALICE, SLACK["slack DM"], 5)  # still in the DM
        assert TABS in await ask(h, fake, DANA, DISCORD["guild A other channel"], 6)
        # ... and nowhere the user did not say it: another workspace, a private channel,
        # a group DM, another guild.
        assert TABS not in await ask(h, fake, ALICE, SLACK["another workspace"], 7)
        assert TABS not in await ask(h, fake, ALICE, SLACK["Slack Connect channel"], 8)
        assert TABS not in await ask(h, fake, ALICE, SLACK["private channel"], 9)
        assert TABS not in await ask(h, fake, ALICE, SLACK["group DM"], 10)
        assert TABS not in await ask(h, fake, DANA, DISCORD["guild B"], 11)
        assert TABS not in await ask(h, fake, DANA, DISCORD["guild A private"], 12)
        # Another person's same fact stays in their DM.
        assert TABS not in await ask(h, fake, bob, SLACK["public channel"], 13)
        [bobs] = await h.service.list_memories(user_key=bob, limit=10)
        assert bobs.place is not None and bobs.place.kind == "dm"


async def test_what_the_user_did_not_say_again_keeps_its_narrow_place(
    fake: FakeAnthropic, db_url: str
) -> None:
    younger = "The user has a younger brother."
    group = "The user prefers dark mode in every editor."
    async with harness(fake, db_url) as h:
        fake.enqueue(memories_reply((younger, "fact", "general")), kind="extract")
        await h.say(said(ALICE, SLACK["slack DM"], "my younger brother visits", 1))
        await h.reflector.drain(10)
        fake.enqueue(memories_reply((group, "preference", "tools")), kind="extract")
        await h.say(said(ALICE, SLACK["group DM"], "dark mode everywhere", 2))
        await h.reflector.drain(10)
        # The general fact and the group DM's fact said again (in other words) in public.
        fake.enqueue(
            memories_reply(
                ("The user has a brother.", "fact", "general"),
                ("The user prefers dark mode in all editors.", "preference", "tools"),
            ),
            kind="extract",
        )
        await h.say(said(ALICE, SLACK["public channel"], "I have a brother; dark mode", 3))
        await h.reflector.drain(10)
        everything = "what do you remember about me?"
        public = await ask(h, fake, ALICE, SLACK["another public channel"], 4, everything)
        assert "The user has a brother." in public and younger not in public
        assert "The user prefers dark mode in all editors." in public and group not in public
        assert group in await ask(h, fake, ALICE, SLACK["group DM"], 5, everything)  # kept
        stored = {m.text: m.place for m in await h.service.list_memories(user_key=ALICE)}
        assert stored[younger] == SLACK["slack DM"] and stored[group] == SLACK["group DM"]


async def test_a_private_fact_said_word_for_word_in_public_is_known_there_and_kept_private(
    fake: FakeAnthropic, db_url: str
) -> None:
    # Learned in a group DM (Slack) and a private channel (Discord), then said word for
    # word in a public channel: known in that public channel (the user said it there),
    # still known where it was first learned, and the public place shows nothing of the
    # private copy.
    pairs = (
        (ALICE, SLACK["group DM"], SLACK["public channel"]),
        (DANA, DISCORD["guild A private"], DISCORD["guild A"]),
    )
    async with harness(fake, db_url) as h:
        for n, (user, private, public) in enumerate(pairs):
            fake.enqueue(memories_reply((TABS, "preference", "code")), kind="extract")
            await h.say(said(user, private, "I prefer tabs over spaces", 10 * n + 1))
            await h.reflector.drain(10)
            [first] = await h.service.list_memories(user_key=user, limit=10)
            fake.enqueue(memories_reply((TABS, "preference", "code")), kind="extract")
            await h.say(said(user, public, "I prefer tabs over spaces", 10 * n + 2))
            await h.reflector.drain(10)
            # Two copies, one per place; the owner's own listing shows the sentence once.
            [shown] = await h.service.list_memories(user_key=user, limit=10)
            assert shown.text == TABS and shown.place == public and shown.id != first.id
            still = await h.store.get(user_key=user, memory_id=first.id)
            assert still is not None and still.active and still.place == private
            # Where the public copy is listed, the private one is not.
            listed = await h.service.list_memories(
                user_key=user, limit=10, reach=usable_reaches(public)
            )
            assert [m.id for m in listed] == [shown.id]
        assert TABS in await ask(h, fake, ALICE, SLACK["public channel"], 3)
        assert TABS in await ask(h, fake, ALICE, SLACK["another public channel"], 4)
        assert TABS in await ask(h, fake, ALICE, SLACK["group DM"], 5)
        assert TABS in await ask(h, fake, DANA, DISCORD["guild A other channel"], 6)
        assert TABS in await ask(h, fake, DANA, DISCORD["guild A private"], 7)
        assert TABS not in await ask(h, fake, ALICE, SLACK["private channel"], 8)
        assert TABS not in await ask(h, fake, ALICE, SLACK["another workspace"], 9)
        assert TABS not in await ask(h, fake, DANA, DISCORD["guild B"], 10)
        # In the DM, the prompt carries the sentence once.
        await h.say(said(ALICE, SLACK["slack DM"], "what do you remember about me?", 11))
        await h.reflector.drain(10)
        block = memory_text(fake.requests_of("chat")[-1].body)
        assert memory_lines(block).count(TABS) == 1
        # A search of the owner's (/memories search, Discord's autocomplete) finds it once.
        found = await h.service.search(user_key=ALICE, query="tabs over spaces")
        assert [s.memory.text for s in found] == [TABS]
        # Said a third time where a copy is usable: nothing new.
        fake.enqueue(memories_reply((TABS, "preference", "code")), kind="extract")
        await h.say(said(ALICE, SLACK["another public channel"], "tabs, I said", 12))
        await h.reflector.drain(10)
        assert len(await h.store.export(user_key=ALICE)) == 2
        # Forgetting the sentence where it was said in public forgets it everywhere.
        [public_copy] = await h.service.list_memories(
            user_key=ALICE, reach=usable_reaches(SLACK["public channel"])
        )
        assert await h.store.forget(user_key=ALICE, memory_id=public_copy.id)
        assert await h.store.export(user_key=ALICE) == []
        assert TABS not in await ask(h, fake, ALICE, SLACK["group DM"], 13)
