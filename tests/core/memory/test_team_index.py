"""A channel's entries indexed in the process (core.memory.team_index): the same BM25 as the
stores' search on both backends, and only for channels small enough to hold."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.memory import team as team_module
from core.memory.team import TeamMemory
from core.memory.team_index import ChannelIndex, TermCache
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.types import NewMemory, Place
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import harness

C1 = Place("slack", "public_channel", "T1", "C1")
KEY = "slack:T1:C1"
WORDS = "billing database migration owner runbook deploy release staging tests pager".split()
QUERIES = [
    "which database did we pick for billing?",
    "who owns the migration runbook",
    "deploy deploy release",  # a repeated word
    "staging pager rota tests",
    "what",  # stop words only
    "nothing matches xyzzy",
    "Überweisung 🍕 billing",
]


def entry(i: int) -> str:
    picked = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 4))
    return f"The team settled {picked} in round {i % 5}."


async def seed(store: Store) -> None:
    """About 40 entries of the channel, one a minute, and one in German with an emoji."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    texts = [*dict.fromkeys(entry(i) for i in range(40)), "Die Überweisung läuft 🍕."]
    await store.add_many(
        user_key=KEY,
        memories=[
            NewMemory(text=t, created_at=start + timedelta(minutes=i), place=C1)
            for i, t in enumerate(texts)
        ],
        dedupe=None,
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=40) as f:
        yield f


async def test_the_index_ranks_as_the_stores_search(store: Store) -> None:
    await seed(store)
    memories = await store.list_memories(user_key=KEY, limit=1000)
    index = ChannelIndex.build(memories, TermCache())
    for query in QUERIES:
        # Fewer entries than the store's candidate pool: its search is exact BM25 too.
        expected = await store.search(user_key=KEY, query=query, k=8)
        found = index.search(query, k=8)
        assert [(s.memory.id, s.score) for s in found] == [
            (s.memory.id, s.score) for s in expected
        ], query
        assert [s.memory for s in found] == [s.memory for s in expected]
    skip = {s.memory.id for s in index.search(QUERIES[0], k=3)}
    rest = index.search(QUERIES[0], k=8, skip=skip)
    matching = index.search(QUERIES[0], k=1000)
    assert [s for s in matching if s.memory.id not in skip][:8] == rest
    assert index.search(QUERIES[0], k=0) == [] and index.search("", k=5) == []
    assert ChannelIndex.build([], TermCache()).search("billing", k=5) == []


async def test_an_index_extended_with_new_entries_ranks_as_one_built_whole(store: Store) -> None:
    await seed(store)
    every = await store.list_memories(user_key=KEY, limit=1000)  # newest first
    cache = TermCache()
    older = ChannelIndex.build(every[5:], cache)
    grown = older.extended(every, cache)
    assert grown is not None and len(grown.memories) == len(every)
    whole = ChannelIndex.build(every, TermCache())
    for query in QUERIES:
        assert grown.search(query, k=8) == whole.search(query, k=8), query
        assert older.search(query, k=50) == ChannelIndex.build(every[5:], TermCache()).search(
            query, k=50
        )  # the index it grew from is unchanged
    assert grown.extended(every, cache) is grown  # nothing new
    assert grown.extended(every[1:], cache) is None  # an entry gone: built whole


async def test_a_channel_too_large_to_index_is_recalled_through_the_store(
    fake: FakeAnthropic, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(team_module, "INDEXED_ENTRIES", 5)
    async with harness(fake, db_url) as h:
        await h.store.see_channel(place=C1)
        team = TeamMemory(h.store, deduper=Deduper(), budget_tokens=0)
        await team.switch(channel_key=KEY, on=True, by="slack:T1:UA")
        for i in range(4):
            await team.remember(channel_key=KEY, text=entry(i), by="slack:T1:UA")
        small = await team.context(place=C1, query="billing database", k=3)
        assert small is not None and small.recalled and team._indexes.get(KEY) is not None
        for i in range(4, 12):
            await team.remember(channel_key=KEY, text=entry(i), by="slack:T1:UA")
        searched: list[str] = []
        search = h.store.search

        async def spied(**kw: object) -> object:
            searched.append(str(kw["user_key"]))
            return await search(**kw)  # type: ignore[arg-type]

        monkeypatch.setattr(h.store, "search", spied)
        large = await team.context(place=C1, query="billing database", k=3)
        assert large is not None and large.recalled and searched == [KEY]
        info = await h.store.channel(channel_key=KEY)
        assert info is not None and team._indexes[KEY][0] != info.revision  # not this one


async def test_the_index_follows_every_change_of_the_channel(
    fake: FakeAnthropic, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with harness(fake, db_url) as h:
        await h.store.see_channel(place=C1)
        # A block of a few entries (the 6 newest read for it), recall over the rest.
        team = TeamMemory(h.store, deduper=Deduper(), budget_tokens=5 * 16)
        await team.switch(channel_key=KEY, on=True, by="slack:T1:UA")
        ids = [
            (await team.remember(channel_key=KEY, text=entry(i), by="slack:T1:UA")).memory_id
            for i in range(10)
        ]
        reads: list[int] = []
        listed = h.store.list_memories

        async def counted(**kw: Any) -> Any:
            reads.append(int(kw["limit"]))
            return await listed(**kw)

        monkeypatch.setattr(h.store, "list_memories", counted)

        async def recalled(query: str) -> set[int]:
            context = await team.context(place=C1, query=query, k=20)
            assert context is not None and context.block  # the prompt carries both
            return {s.memory.id for s in context.recalled} | {m.id for m in context.block}

        assert await recalled("The team settled") == set(ids)
        assert reads[-1] > 6  # read whole once
        added = await team.remember(channel_key=KEY, text="The pager rota is weekly.", by="u")
        assert added.memory_id in await recalled("pager rota")
        assert reads[-1] == 6  # only the newest: the others were indexed already
        # An older entry forgotten: gone from recall (the counts disagree: read whole).
        await team.forget(channel_key=KEY, memory_id=ids[0], by="slack:T1:UA")
        assert ids[0] not in await recalled("The team settled")
        assert reads[-1] > 6
        assert await recalled("The team settled") == {*ids[1:], added.memory_id}
