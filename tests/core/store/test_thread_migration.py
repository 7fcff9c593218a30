"""m026 on both backends: what was learned in a thread of a Discord private channel, stored
for the whole channel before a private thread was a place of its own, becomes the
thread's own. A team entry whose link names a thread leaves the channel's memory for the
thread's (memory off there, recall and counts follow); one said in the channel itself, or
added by a command (no link), stays; a person's memory learned in the thread is narrowed
to it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.rules.dedupe import Deduper
from core.rules.places import usable_reaches
from core.runtime import open_store
from core.store.postgres import base as pg_base
from core.store.postgres.base import MIGRATIONS as PG_MIGRATIONS
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.base import MIGRATIONS as SQLITE_MIGRATIONS
from core.store.thread_repair import conversation_place, linked_place, thread_place
from core.types import Attribution, NewMemory, Place
from tests.conftest import run_sync
from tests.core.store.test_place_migration import url  # noqa: F401

GUILD, CHANNEL, THREAD = "100", "200", "300"
PARENT_KEY, THREAD_KEY = f"discord:{GUILD}:{CHANNEL}", f"discord:{GUILD}:{THREAD}"
PARENT = Place("discord", "private_channel", GUILD, CHANNEL)
IN_THREAD = Place("discord", "private_channel", GUILD, THREAD)
BOB = "discord:42"
AT = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
SECRET_PLAN = "The team will lay off the night shift in January."
IN_CHANNEL = "The team uses PostgreSQL 16 for billing."
BY_COMMAND = "The billing runbook is in the Ops wiki."
BOBS = "The user is interviewing with another company."


def link(channel: str, message: str) -> str:
    return f"https://discord.com/channels/{GUILD}/{channel}/{message}"


def before_m026(at: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """A store as the version before m026 left it after a private thread of a private
    channel was used: its entries and Bob's fact kept for the channel."""
    module = sqlite_base if backend == "sqlite" else pg_base
    migrations = SQLITE_MIGRATIONS if backend == "sqlite" else PG_MIGRATIONS
    index = [m[1] for m in migrations].index("m026_thread_places")

    async def build() -> dict[str, int]:
        store = await open_store(at)
        try:
            await store.see_channel(place=PARENT)
            await store.set_channel_memory(channel_key=PARENT_KEY, on=True, by=BOB, at=AT)
            ids = {}
            for text, where in (
                (SECRET_PLAN, link(THREAD, "1")),
                (IN_CHANNEL, link(CHANNEL, "2")),
                (BY_COMMAND, None),
            ):
                added = await store.add(
                    user_key=PARENT_KEY,
                    memory=NewMemory(text=text, origin="shared", place=PARENT),
                    dedupe=Deduper(),
                )
                ids[text] = added.id
                said = Attribution(memory_id=added.id, said_at=AT, said_by=BOB, link=where)
                await store.attribute(channel_key=PARENT_KEY, entries=[said])
            for text, key in ((BOBS, THREAD_KEY), ("The user drinks mate.", f"{PARENT_KEY}:9")):
                added = await store.add(
                    user_key=BOB,
                    memory=NewMemory(
                        text=text, origin="shared", place=PARENT, conversation_key=key
                    ),
                    dedupe=Deduper(),
                )
                ids[text] = added.id
            return ids
        finally:
            await store.close()

    with monkeypatch.context() as m:
        m.setattr(module, "MIGRATIONS", migrations[:index])
        return run_sync(build())


async def test_a_private_threads_entries_leave_the_channels_memory(
    backend: str,
    url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = before_m026(url, backend, monkeypatch)
    store = await open_store(url, migrate=True)  # m026 runs
    try:
        parent = {m.text for m in await store.list_memories(user_key=PARENT_KEY, limit=50)}
        assert parent == {IN_CHANNEL, BY_COMMAND}
        assert await store.count(user_key=PARENT_KEY) == 2
        assert not await store.search(user_key=PARENT_KEY, query="night shift layoff", k=5)
        said = await store.attributions(channel_key=PARENT_KEY, memory_ids=None)
        assert set(said) == {ids[IN_CHANNEL], ids[BY_COMMAND]}
        # The thread's own memory holds it, who said it and where, memory off.
        [moved] = await store.list_memories(user_key=THREAD_KEY, limit=50)
        assert (moved.id, moved.text, moved.place) == (ids[SECRET_PLAN], SECRET_PLAN, IN_THREAD)
        [found] = await store.search(user_key=THREAD_KEY, query="night shift", k=5)
        assert found.memory.id == moved.id and await store.count(user_key=THREAD_KEY) == 1
        kept = await store.attributions(channel_key=THREAD_KEY, memory_ids=None)
        assert kept[moved.id].said_by == BOB and kept[moved.id].link == link(THREAD, "1")
        thread = await store.channel(channel_key=THREAD_KEY)
        assert thread is not None and thread.kind == "private_channel" and not thread.in_use
        assert [e.event for e in await store.history(user_key=THREAD_KEY)] == ["added"]
        # Bob's fact from the thread: used in the thread (and his DM), not in the channel.
        in_channel = await store.search(
            user_key=BOB, query="interviewing company", k=5, reach=usable_reaches(PARENT)
        )
        assert not in_channel
        in_thread = await store.search(
            user_key=BOB, query="interviewing company", k=5, reach=usable_reaches(IN_THREAD)
        )
        assert [s.memory.id for s in in_thread] == [ids[BOBS]]
        mate = await store.get(user_key=BOB, memory_id=ids["The user drinks mate."])
        assert mate is not None and mate.place == PARENT  # said in the channel itself
        assert await store.count(user_key=BOB) == 2
    finally:
        await store.close()


def test_only_another_private_place_of_the_same_guild_is_a_thread() -> None:
    def said_in(link_or_key: str) -> Place | None:
        if link_or_key.startswith("https://"):
            return thread_place(PARENT, linked_place(PARENT_KEY, link_or_key))
        return thread_place(PARENT, conversation_place(link_or_key))

    assert said_in(link(THREAD, "1")) == IN_THREAD
    assert said_in(link(CHANNEL, "1")) is None  # said in the channel itself
    assert said_in(f"https://discord.com/channels/999/{THREAD}/1") is None  # another guild
    assert said_in("https://example.com/x") is None
    assert said_in(THREAD_KEY) == IN_THREAD
    assert said_in(f"{PARENT_KEY}:9") is None  # the channel's own conversation
    assert said_in(f"discord:dm:{THREAD}") is None
    public = Place("discord", "public_channel", GUILD, CHANNEL)
    assert thread_place(public, conversation_place(THREAD_KEY)) is None
    # Slack's threads are places of their channel: a link and a thread's key name it.
    slack = Place("slack", "private_channel", "T1", "C1")
    assert thread_place(slack, conversation_place("slack:T1:C1:1700.1")) is None
    assert linked_place("slack:T1:C1", "https://slack.com/archives/C1/p17001") is None
