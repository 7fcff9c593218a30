"""A channel's own memory (team memory), through the real turn loop, reflection and the
fake Anthropic API, on both backends (``db_url``): a team decision reaches a later member
in that channel and its threads and nowhere else; on/off, listing, forget with undo,
attribution removed by ``/forget all``; bad input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.chat.loop import IncomingMessage
from core.errors import MemoryInputError, MemoryNotFound, PlanNotPending, SecretInMemory
from core.memory.team import channel_block, team_sentence
from core.rules.links import message_link
from core.types import NewMemory, Place, PlaceKind
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.loop_helpers import Harness, dm, harness

ALICE, BOB, CAROL = "slack:T1:UALICE", "slack:T1:UBOB", "slack:T1:UCAROL"
DECISION = "we use PostgreSQL 16 for billing; Bob owns the migration"
PG16 = "The team uses PostgreSQL 16 for billing."
OWNER = "Bob owns the billing migration."
QUESTION = "which database did we pick for billing?"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=50) as f:
        yield f


def said(
    user: str,
    text: str,
    *,
    team: str = "T1",
    channel: str = "C1",
    thread: str = "100.0",
    kind: PlaceKind = "public_channel",
    author: str = "Alice",
    ref: str | None = "100.5",
) -> IncomingMessage:
    """A Slack message in a channel (thread ``thread``) with its place."""
    return dm(
        user,
        text,
        origin="shared",
        conversation_key=f"slack:{team}:{channel}:{thread}",
        where="a Slack channel thread",
        workspace=team,
        author=author,
        platform_ref=ref,
        place=Place(platform="slack", kind=kind, workspace=team, channel=channel),
    )


def team_reply(*texts: str) -> dict[str, Any]:
    return {
        "memories": [],
        "team": [{"text": t, "kind": "fact", "category": "workflow"} for t in texts],
    }


async def turn(h: Harness, fake: FakeAnthropic, message: IncomingMessage, *extract: Any) -> str:
    """Answer ``message``, its reflection answering ``extract`` (default: nothing); the
    system text of the chat request."""
    fake.enqueue(Reply(text="Noted."), kind="chat")
    if extract:
        fake.enqueue(*extract, kind="extract")
    await h.say(message)
    await h.reflector.drain(10)
    return "\n".join(str(b["text"]) for b in fake.requests_of("chat")[-1].body["system"])


async def teach(h: Harness, fake: FakeAnthropic, **where: Any) -> None:
    """Alice's first message records the channel; memory on; Alice's decision learned."""
    await turn(h, fake, said(ALICE, "hello", **where))
    key = said(ALICE, "x", **where).place.channel_key  # type: ignore[union-attr]
    assert key is not None
    await h.loop.team.switch(channel_key=key, on=True, by=ALICE)
    await turn(h, fake, said(ALICE, DECISION, **where), team_reply(PG16, OWNER))


async def test_team_decision_in_its_channel_and_threads_and_nowhere_else(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        # The extraction asked for team entries only once the channel's memory was on.
        schemas = [r.output_schema or {} for r in fake.requests_of("extract")]
        assert "team" not in schemas[0]["properties"] and "team" in schemas[1]["properties"]
        later = await turn(h, fake, said(CAROL, QUESTION, thread="200.0", author="Carol"))
        same_thread = await turn(h, fake, said(CAROL, QUESTION, author="Carol"))
        blocks = fake.requests_of("chat")[-1].body["system"]
        other_channel = await turn(h, fake, said(CAROL, QUESTION, channel="C2"))
        other_workspace = await turn(
            h, fake, said("slack:T2:UCAROL", QUESTION, team="T2", author="Carol")
        )
        direct = await turn(h, fake, dm(CAROL, QUESTION, conversation_key="slack:T1:DCAROL"))
        group = await turn(
            h,
            fake,
            dm(
                CAROL,
                QUESTION,
                origin="shared",
                conversation_key="slack:T1:GMPIM:1.0",
                place=Place(platform="slack", kind="group_dm", workspace="T1", channel="GMPIM"),
            ),
        )
    for text in (later, same_thread):
        # Who said it by the verified id, the display name beside it as data (anyone can
        # call themselves "Alice").
        assert PG16 in text and OWNER in text and '(<@UALICE> "Alice")' in text
    assert blocks[1]["cache_control"] == {"type": "ephemeral"}  # its own cached block
    assert "<channel_memory>" in blocks[1]["text"]  # right after the persona
    for text in (other_channel, other_workspace, direct, group):
        assert "PostgreSQL" not in text and "<channel_memory>" not in text


async def test_recall_finds_an_entry_outside_the_block_by_other_words(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url, channel_memory_tokens=0) as h:  # recall only
        await teach(h, fake)
        for n in range(30):
            await h.loop.team.remember(
                channel_key="slack:T1:C1", text=f"The team's standup number {n} is at nine.", by=BOB
            )
        text = await turn(h, fake, said(CAROL, QUESTION, thread="300.0", author="Carol"))
    assert "<channel_memory>" not in text
    recalled = text.split("<channel_memory_recalled>", 1)[1]
    assert PG16 in recalled


async def test_a_busy_channel_reads_its_block_once_a_revision(
    fake: FakeAnthropic, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns that arrive at once after a change wait for one read of the channel's block
    (not one read each), and its text is built once a revision (bench/load.py --channels)."""
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        reads: list[str] = []
        listed = h.store.list_memories

        async def counted(**kw: Any) -> Any:
            reads.append(str(kw.get("user_key")))
            return await listed(**kw)

        monkeypatch.setattr(h.store, "list_memories", counted)
        place = said(CAROL, QUESTION).place
        team = h.loop.team

        async def burst() -> list[Any]:
            return await asyncio.gather(
                *(team.context(place=place, query=QUESTION, k=5) for _ in range(8))
            )

        await team.remember(channel_key="slack:T1:C1", text="The team deploys on Fridays.", by=BOB)
        first = await burst()
        assert reads == ["slack:T1:C1"]  # eight turns, one read
        again = await burst()
        assert reads == ["slack:T1:C1"]  # the same revision: no read
        await team.remember(channel_key="slack:T1:C1", text="The pager rota is weekly.", by=BOB)
        changed = await burst()
        assert reads == ["slack:T1:C1"] * 2
    texts = {channel_block(c) for c in first + again}
    assert len(texts) == 1 and "The team deploys on Fridays." in str(texts.pop())
    fresh = replace(changed[0], rendered=None)  # the kept text is the text built afresh
    assert channel_block(changed[0]) == channel_block(fresh)
    assert "The pager rota is weekly." in str(channel_block(fresh))


async def test_a_cancelled_read_of_the_block_does_not_cancel_the_turns_waiting_for_it(
    fake: FakeAnthropic, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        await h.loop.team.remember(
            channel_key="slack:T1:C1", text="The team ships on Mondays.", by=BOB
        )
        started, listed = asyncio.Event(), h.store.list_memories
        stalls = [True]

        async def stalled(**kw: Any) -> Any:
            if stalls.pop() if stalls else False:
                started.set()
                await asyncio.sleep(30)  # the reader's turn is cancelled here
            return await listed(**kw)

        monkeypatch.setattr(h.store, "list_memories", stalled)
        place = said(CAROL, QUESTION).place
        reader = asyncio.create_task(h.loop.team.context(place=place, query=QUESTION, k=5))
        await started.wait()
        waiter = asyncio.create_task(h.loop.team.context(place=place, query=QUESTION, k=5))
        await asyncio.sleep(0.05)
        reader.cancel()
        got = await asyncio.wait_for(waiter, 10)
    assert reader.cancelled()
    assert got is not None and "The team ships on Mondays." in str(channel_block(got))


async def test_group_dm_and_dm_never_teach_a_channel(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        group = Place(platform="slack", kind="group_dm", workspace="T1", channel="GMPIM")
        message = dm(ALICE, DECISION, origin="shared", conversation_key="slack:T1:GMPIM:1.0")
        assert await h.store.see_channel(place=group) is None
        await turn(h, fake, IncomingMessage(**{**message.__dict__, "place": group}))
        assert "team" not in (fake.requests_of("extract")[0].output_schema or {})["properties"]
        assert await h.store.list_channels() == []


async def test_off_keeps_entries_unused_and_on_again_uses_them(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        await h.loop.team.switch(channel_key="slack:T1:C1", on=False, by=BOB)
        off = await turn(h, fake, said(CAROL, QUESTION, thread="400.0"))
        assert "team" not in (fake.requests_of("extract")[-1].output_schema or {})["properties"]
        [info] = await h.store.list_channels()
        assert (info.memory_on, info.entries, info.changed_by) == (False, 2, BOB)
        await h.loop.team.switch(channel_key="slack:T1:C1", on=True, by=CAROL)
        on = await turn(h, fake, said(CAROL, QUESTION, thread="400.0"))
    assert PG16 not in off and PG16 in on


async def test_private_memory_stays_private_when_the_channel_becomes_public(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake, kind="private_channel")
        private = await turn(h, fake, said(CAROL, QUESTION, kind="private_channel"))
        public = await turn(h, fake, said(CAROL, QUESTION, kind="public_channel"))
        info = await h.store.channel(channel_key="slack:T1:C1")
        assert info is not None and info.needs_review and not info.in_use
        await h.loop.team.switch(channel_key="slack:T1:C1", on=True, by=CAROL)  # reviewed
        reviewed = await turn(h, fake, said(CAROL, QUESTION, kind="public_channel"))
    assert PG16 in private and PG16 not in public and PG16 in reviewed


async def test_attribution_link_and_forget_all_removes_the_name(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        entries = await h.loop.team.entries("slack:T1:C1")
        assert {m.text for m, _ in entries} == {PG16, OWNER}
        for _, who in entries:
            assert who is not None and who.said_by == ALICE and who.said_by_name == "Alice"
            assert who.link == "https://slack.com/archives/C1/p1005"
            assert who.said_at == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
        await h.service.forget_all(user_key=ALICE)
        after = await h.loop.team.entries("slack:T1:C1")
        text = await turn(h, fake, said(CAROL, QUESTION, author="Carol"))
    assert {m.text for m, _ in after} == {PG16, OWNER}  # the entries stay
    assert all(w is not None and w.said_by is None and w.said_by_name is None for _, w in after)
    assert PG16 in text and "Alice" not in text.split("<channel_memory>")[1].split("</")[0]


async def test_members_add_correct_forget_and_undo(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        team = h.loop.team
        await turn(h, fake, said(ALICE, "hello"))
        key = "slack:T1:C1"
        added = await team.remember(channel_key=key, text="we deploy on Tuesdays", by=BOB)
        assert added.text == "The team deploys on Tuesdays."
        dup = await team.remember(channel_key=key, text="The team deploys on Tuesdays.", by=ALICE)
        assert dup.status == "duplicate" and dup.memory_id == added.memory_id
        fixed = await team.correct(
            channel_key=key, memory_id=added.memory_id, text="we deploy on Wednesdays", by=CAROL
        )
        assert [m.text for m, _ in await team.entries(key)] == ["The team deploys on Wednesdays."]
        [(_, who)] = await team.entries(key)
        assert who is not None and who.said_by == BOB and who.changed_by == CAROL
        assert await team.undo(channel_key=key, token=fixed.undo, by=ALICE) == 1
        assert [m.text for m, _ in await team.entries(key)] == ["The team deploys on Tuesdays."]
        gone = await team.forget(channel_key=key, memory_id=added.memory_id, by=ALICE)
        assert await team.entries(key) == []
        with pytest.raises(PlanNotPending):  # another channel's token
            await team.undo(channel_key="slack:T1:C2", token=gone.undo, by=ALICE)
        assert await team.undo(channel_key=key, token=gone.undo, by=BOB) == 1
        with pytest.raises(PlanNotPending):  # used once
            await team.undo(channel_key=key, token=gone.undo, by=BOB)
        assert [m.text for m, _ in await team.entries(key)] == ["The team deploys on Tuesdays."]
        # Undo of an addition takes it out again.
        again = await team.remember(channel_key=key, text="The pager rota is in PagerDuty.", by=BOB)
        assert await team.undo(channel_key=key, token=again.undo, by=CAROL) == 1
        assert [m.text for m, _ in await team.entries(key)] == ["The team deploys on Tuesdays."]
        # Undo tokens last the 7-day undo window, no longer.
        late = await team.forget(channel_key=key, memory_id=added.memory_id, by=ALICE)
        team.clock = lambda: datetime.now(UTC) + timedelta(days=8)
        with pytest.raises(PlanNotPending):
            await team.undo(channel_key=key, token=late.undo, by=ALICE)


async def test_bad_input_is_refused_and_nothing_is_lost(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url, channel_memory_admins="slack:T1:UALICE") as h:
        team = h.loop.team
        await turn(h, fake, said(ALICE, "hello"))
        await turn(h, fake, said(ALICE, "hello", channel="C2"))
        key = "slack:T1:C1"
        kept = await team.remember(channel_key=key, text="The wiki lives at wiki.example.", by=BOB)
        other = await team.remember(channel_key="slack:T1:C2", text="C2 ships on Fridays.", by=BOB)
        personal = await h.store.add(
            user_key=BOB, memory=NewMemory(text="The user likes tea."), dedupe=team.deduper
        )
        for text in ("", "   ", "x" * 5000, "\x00\x01"):
            with pytest.raises(MemoryInputError):
                await team.remember(channel_key=key, text=text, by=BOB)
        with pytest.raises(SecretInMemory):
            await team.remember(
                channel_key=key, text="The deploy key is AKIAIOSFODNN7EXAMPLE.", by=BOB
            )
        for wrong in (other.memory_id, personal.id, 0, -3, 2**70):
            with pytest.raises(MemoryNotFound):
                await team.forget(channel_key=key, memory_id=wrong, by=BOB)
        with pytest.raises(MemoryInputError):  # never seen
            await team.remember(channel_key="slack:T1:CNEVER", text="The team uses Go.", by=BOB)
        with pytest.raises(MemoryInputError):  # not a member of the admins
            await team.switch(channel_key=key, on=True, by=BOB)
        with pytest.raises(MemoryInputError):  # Discord without Manage Channels
            await team.switch(channel_key=key, on=True, by=ALICE, can_manage=False)
        assert not (await team.info(key)).memory_on
        assert (await team.switch(channel_key=key, on=True, by=ALICE)).memory_on
        for token in ("", "x" * 5000, "bad\x00token", "A" * 16):
            with pytest.raises(PlanNotPending):
                await team.undo(channel_key=key, token=token, by=BOB)
        assert [m.id for m, _ in await team.entries(key)] == [kept.memory_id]
        assert [m.id for m, _ in await team.entries("slack:T1:C2")] == [other.memory_id]


async def test_a_team_secret_from_reflection_is_never_stored(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        await turn(
            h,
            fake,
            said(ALICE, "the staging token", thread="500.0"),
            team_reply(
                "The staging AWS key is AKIAIOSFODNN7EXAMPLE.", "The team ships on Fridays."
            ),
        )
        texts = {m.text for m, _ in await h.loop.team.entries("slack:T1:C1", limit=50)}
    assert "The team ships on Fridays." in texts
    assert not any("AKIA" in t for t in texts)


def test_team_sentences_and_links() -> None:
    assert team_sentence("we use Go") == "The team uses Go."
    assert team_sentence("our wiki is Notion") == "The team's wiki is Notion."
    assert team_sentence("we decided on Rust!") == "The team decided on Rust!"
    # However it was typed (two spaces, a tab, a line break): the verb after "we" agrees.
    assert team_sentence("we  use\tPostgres\n16") == "The team uses Postgres 16."
    assert team_sentence(" \nwe\tuse Go ") == "The team uses Go."
    assert message_link("slack", "slack:T1:C1:100.0", "100.5") == (
        "https://slack.com/archives/C1/p1005"
    )
    assert message_link("discord", "discord:9:8:7", "6") == "https://discord.com/channels/9/8/6"
    assert message_link("discord", "discord:dm:8", "6") is None
    assert message_link("slack", "slack:T1:D1", "1.0") is None


SECRET_PLAN = "The team plans to acquire Initech in March."


async def test_entries_learned_while_private_are_not_used_when_public_again(
    fake: FakeAnthropic,
    db_url: str,
) -> None:
    # Memory turned on while the channel was public; the channel is then made private and
    # a confidential decision is learned there; then it is made public again. The entries
    # learned while private must not reach the public channel without a review (the rule
    # of core/memory/team.py's docstring and ChannelInfo.needs_review).
    async with harness(fake, db_url) as h:
        await teach(h, fake)  # public, memory on (memory_kind = public_channel)
        await turn(
            h,
            fake,
            said(ALICE, "we plan to buy Initech in March", kind="private_channel", thread="500.0"),
            team_reply(SECRET_PLAN),
        )
        private = await turn(h, fake, said(CAROL, "what do we plan?", kind="private_channel"))
        assert "Initech" in private  # learned while private, used there
        public = await turn(
            h,
            fake,
            said(CAROL, "what do we plan? " + QUESTION, kind="public_channel", thread="600.0"),
        )
    assert "Initech" not in public, "a private-time entry reached the public channel unreviewed"


async def test_forget_all_during_a_team_reflection_leaves_no_name(
    fake: FakeAnthropic,
    db_url: str,
) -> None:
    """Alice's /forget all lands right after her reflection committed (its team entries in
    the same transaction): the entries are kept and her name goes from them all the same."""
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        real = h.store.finish_reflection

        async def forget_after(**kw):  # type: ignore[no-untyped-def]
            results = await real(**kw)
            await h.service.forget_all(user_key=ALICE)
            return results

        h.store.finish_reflection = forget_after  # type: ignore[method-assign]
        await turn(
            h,
            fake,
            said(ALICE, "we moved standup to ten", thread="700.0"),
            team_reply("The team holds standup at ten."),
        )
        said_by = await h.store.attributions(channel_key="slack:T1:C1", memory_ids=None)
    assert said_by, "the team entry is kept"
    named = [a for a in said_by.values() if a.said_by == ALICE or a.said_by_name == "Alice"]
    assert named == [], named


class _Crash(Exception):
    """The process dying at one point (the reflector counts it as a crash)."""


async def test_a_crash_right_after_a_team_reflection_commits_keeps_its_entries(
    fake: FakeAnthropic, db_url: str
) -> None:
    """The team entries a channel reflection learned are written in the reflection's own
    transaction: a crash right after its commit (the turn is done, never reflected again)
    loses none of them, each with who said it."""
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        real = h.store.finish_reflection

        async def crash_after(**kw):  # type: ignore[no-untyped-def]
            await real(**kw)
            raise _Crash

        h.store.finish_reflection = crash_after  # type: ignore[method-assign]
        await turn(
            h,
            fake,
            said(BOB, "we release on Tuesdays now", thread="800.0", author="Bob", ref="800.5"),
            team_reply("The team releases on Tuesdays."),
        )
        h.store.finish_reflection = real  # type: ignore[method-assign]
        entries = await h.loop.team.entries("slack:T1:C1", limit=50)
        said_by = await h.store.attributions(channel_key="slack:T1:C1", memory_ids=None)
    tuesday = [m for m, _ in entries if m.text == "The team releases on Tuesdays."]
    assert len(tuesday) == 1, [m.text for m, _ in entries]
    assert said_by[tuesday[0].id].said_by == BOB
    assert said_by[tuesday[0].id].said_by_name == "Bob"


async def test_a_channel_that_turned_private_keeps_one_copy_of_each_entry(
    fake: FakeAnthropic, db_url: str
) -> None:
    # Memory on while public (the decision kept as public); the channel turns private and
    # the decision is settled again word for word: the channel's memory has it once (its
    # entries are read by the channel's key, whatever place they record).
    async with harness(fake, db_url) as h:
        await teach(h, fake)
        await turn(
            h, fake, said(ALICE, DECISION, kind="private_channel", thread="700.0"), team_reply(PG16)
        )
        added = await h.loop.team.remember(channel_key="slack:T1:C1", text=PG16, by=BOB)
        assert added.status == "duplicate"
        texts = [m.text for m, _ in await h.loop.team.entries("slack:T1:C1", limit=50)]
        assert texts.count(PG16) == 1
        block = await turn(h, fake, said(CAROL, QUESTION, kind="private_channel"))
    assert block.count(PG16) == 1
