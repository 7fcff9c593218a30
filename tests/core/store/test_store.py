"""The SQLite store: recall, isolation, dedupe on write, history, forgetting, migrations."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from core.errors import MemoryInputError, MemoryNotFound
from core.memory.service import MemoryService
from core.rules.dedupe import Deduper
from core.rules.places import reach_of
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, Place

ALICE, BOB = "slack:T1:U1", "slack:T1:U2"

NASTY_QUERIES = [
    '"',
    '""',
    '"unterminated',
    "*",
    "prefix*",
    "-",
    "-x",
    "foo:bar",
    "e-mail",
    "(",
    "())(",
    "AND",
    "OR",
    "NOT",
    "a AND OR NOT b",
    "NEAR(a b)",
    "NEAR",
    "C++",
    "c#",
    "🎉🎉",
    "東京",
    "",
    "   ",
    "x" * 20_000,
    "word " * 4_000,
    "'; DROP TABLE memories; --",
    "\x00nul",
    "^start",
    "col : value",
    "{a b}",
    "u1_editor",
]


async def seed(service: MemoryService) -> None:
    for text in [
        "The user prefers tabs over spaces.",
        "The user writes C++ and Rust at work.",
        "The user's e-mail client is Thunderbird.",
        "The user lives in Berlin.",
        "The user prefers dark mode in every editor.",
        "The user loves the café on Main Street 🎉.",
        "The user's team meets on Tuesdays in Tokyo (東京).",
    ]:
        await service.remember(user_key=ALICE, text=text)
    await service.remember(user_key=BOB, text="Bob's secret: the user prefers spaces over tabs.")


@pytest.mark.parametrize("query", NASTY_QUERIES)
async def test_any_text_is_a_valid_query(service: MemoryService, query: str) -> None:
    await seed(service)
    found = await service.search(user_key=ALICE, query=query, k=6)
    assert all(f.memory.user_key == ALICE for f in found)
    assert len(found) <= 6


async def test_recall_ranks_the_relevant_memory_first(service: MemoryService) -> None:
    await seed(service)
    cases = {
        "tabs or spaces?": "tabs over spaces",
        "what mail client": "Thunderbird",
        "C++": "C++ and Rust",
        "where does the user live": "Berlin",
        "東京": "Tokyo",
        "café": "café",
        "editors": "dark mode",
    }
    for query, expected in cases.items():
        found = await service.search(user_key=ALICE, query=query, k=3)
        assert found, query
        assert expected in found[0].memory.text, (query, [f.memory.text for f in found])
        assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


async def test_user_isolation(service: MemoryService) -> None:
    await seed(service)
    assert all(
        "Bob" not in f.memory.text
        for f in await service.search(user_key=ALICE, query="secret spaces tabs Bob", k=10)
    )
    bob_list = await service.list_memories(user_key=BOB)
    assert [m.text for m in bob_list] == ["Bob's secret: the user prefers spaces over tabs."]
    with pytest.raises(MemoryNotFound):
        await service.forget(user_key=ALICE, memory_id=bob_list[0].id)
    assert await service.count(user_key=BOB) == 1
    exported = await service.export(user_key=ALICE)
    assert len(exported) == 7 and all("Bob" not in r["text"] for r in exported)
    assert await service.forget_all(user_key=ALICE) == 7
    assert await service.count(user_key=BOB) == 1
    assert await service.search(user_key=BOB, query="tabs", k=6)
    assert await service.search(user_key="cli:nobody", query="tabs", k=6) == []


@pytest.mark.sqlite_only
async def test_forget_removes_from_recall_and_erases_text(
    service: MemoryService, store: SQLiteStore, db_path: Path
) -> None:
    await seed(service)
    target = (await service.search(user_key=ALICE, query="Thunderbird", k=1))[0].memory
    await service.forget(user_key=ALICE, memory_id=target.id)
    assert await service.search(user_key=ALICE, query="Thunderbird", k=6) == []
    events = await service.history(user_key=ALICE)
    assert [e.event for e in events if e.memory_id == target.id] == ["added", "forgotten"]
    await store.close()
    raw = db_path.read_bytes() + (
        Path(str(db_path) + "-wal").read_bytes() if Path(str(db_path) + "-wal").exists() else b""
    )
    assert b"Thunderbird" not in raw
    with pytest.raises(MemoryNotFound):
        await _forget_again(db_path, target.id)


async def _forget_again(db_path: Path, memory_id: int) -> None:
    s = await SQLiteStore.open(str(db_path))
    try:
        await MemoryService(s).forget(user_key=ALICE, memory_id=memory_id)
    finally:
        await s.close()


async def test_supersede_leaves_recall_but_keeps_the_row(
    store: SQLiteStore, service: MemoryService
) -> None:
    old = await service.remember(user_key=ALICE, text="The user lives in Paris.")
    new = await store.add(
        user_key=ALICE,
        memory=NewMemory(text="The user moved to Berlin.", kind="correction"),
        dedupe=Deduper(),
        supersedes=[old.id],
    )
    assert [f.memory.id for f in await service.search(user_key=ALICE, query="Paris", k=6)] == []
    kept = await store.get(user_key=ALICE, memory_id=old.id)
    assert kept is not None and kept.superseded_by == new.id and not kept.active
    events = await service.history(user_key=ALICE)
    assert ("superseded", old.id, new.id) in [(e.event, e.memory_id, e.related_id) for e in events]
    # A superseded fact can be learned again.
    again = await service.remember(user_key=ALICE, text="The user lives in Paris.")
    assert again.status == "added" and again.id != old.id


async def test_supersede_ignores_other_users_ids(
    store: SQLiteStore, service: MemoryService
) -> None:
    bobs = await service.remember(user_key=BOB, text="The user owns a red bicycle.")
    await store.add(
        user_key=ALICE,
        memory=NewMemory(text="The user owns a blue car."),
        dedupe=Deduper(),
        supersedes=[bobs.id],
    )
    still = await store.get(user_key=BOB, memory_id=bobs.id)
    assert still is not None and still.active
    assert await service.search(user_key=BOB, query="bicycle", k=1)


async def test_place_filter(service: MemoryService) -> None:
    public = Place("slack", "public_channel", "T1", "C1")
    await service.remember(user_key=ALICE, text="The user is job hunting.")
    await service.remember(
        user_key=ALICE, text="The user is on the job board team.", origin="shared", place=public
    )
    shared = await service.search(user_key=ALICE, query="job", k=6, reach=[reach_of(public)])
    assert [f.memory.place for f in shared] == [public]
    dm = await service.search(user_key=ALICE, query="job", k=6, reach=["dm"])
    assert [f.memory.text for f in dm] == ["The user is job hunting."]
    assert dm[0].memory.place == Place("slack", "dm", "T1")  # stored as the owner's DM
    both = await service.search(user_key=ALICE, query="job", k=6)
    assert len(both) == 2


async def test_remember_validates_input(service: MemoryService) -> None:
    with pytest.raises(MemoryInputError):
        await service.remember(user_key=ALICE, text="   ")
    with pytest.raises(MemoryInputError, match="under 200"):
        await service.remember(user_key=ALICE, text="x" * 20_000)
    with pytest.raises(MemoryInputError, match="needs some text"):
        await service.remember(user_key=ALICE, text="\u200b\u200b\u202e\ufeff")  # invisible
    zwsp = await service.remember(user_key=ALICE, text="The user\u200b likes\u202e tea.")
    assert (await service.list_memories(user_key=ALICE))[0].text == "The user likes tea."
    await service.forget(user_key=ALICE, memory_id=zwsp.id)
    assert await service.count(user_key=ALICE) == 0


async def test_200_concurrent_remembers_none_lost(service: MemoryService) -> None:
    texts = [f"The user owns plant number {i} on shelf {i % 7}." for i in range(200)]
    results = await asyncio.gather(*(service.remember(user_key=ALICE, text=t) for t in texts))
    assert all(r.status == "added" for r in results)
    assert len({r.id for r in results}) == 200
    assert await service.count(user_key=ALICE) == 200
    # The same text 50 times at once is stored once.
    again = await asyncio.gather(
        *(service.remember(user_key=BOB, text="The user likes jazz.") for _ in range(50))
    )
    assert sum(r.status == "added" for r in again) == 1
    assert await service.count(user_key=BOB) == 1


async def test_list_is_newest_first_and_paginated(service: MemoryService) -> None:
    ids = [
        (await service.remember(user_key=ALICE, text=f"The user visited city {i}.")).id
        for i in range(5)
    ]
    page1 = await service.list_memories(user_key=ALICE, limit=2)
    page2 = await service.list_memories(user_key=ALICE, limit=2, offset=2)
    assert [m.id for m in page1 + page2] == ids[::-1][:4]


async def test_stats(service: MemoryService) -> None:
    await service.remember(
        user_key=ALICE, text="The user prefers vim.", kind="preference", category="general"
    )
    await service.remember(user_key=ALICE, text="The user uses Linux.", category="tools")
    await service.remember(user_key=BOB, text="The user uses macOS.")
    stats = await service.stats(user_key=ALICE)
    assert stats.total == 2
    assert stats.by_kind == {"preference": 1, "fact": 1}
    assert stats.by_category == {"general": 1, "tools": 1}
    assert (await service.stats()).total == 3


async def test_migrations_from_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    path.touch()
    s = await SQLiteStore.open(str(path))
    assert (await s.applied_migrations())[0] == "m001_initial"
    await s.close()
    again = await SQLiteStore.open(str(path))  # idempotent
    names = await again.applied_migrations()
    await again.close()
    assert names == sorted(set(names))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)
    from core.errors import StoreError

    with pytest.raises(StoreError):
        await SQLiteStore.open(str(path))


async def test_a_rolled_back_first_write_of_a_user_does_not_hand_its_id_to_another(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Alice's first memory write fails after her users row was inserted: the transaction
    # rolls back, and SQLite gives the next new user (Bob) the same uid. Alice's next memory
    # must not be written under it (Bob would recall it).
    async def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("fails inside the write")

    with monkeypatch.context() as patch:
        patch.setattr(store, "_add_one", failing)
        with pytest.raises(RuntimeError):
            await store.add(user_key=ALICE, memory=NewMemory(text="Alice: x."), dedupe=Deduper())
    await store.add(user_key=BOB, memory=NewMemory(text="Bob likes tea."), dedupe=Deduper())
    await store.add(user_key=ALICE, memory=NewMemory(text="Alice has a cat."), dedupe=Deduper())
    assert [m.text for m in await store.list_memories(user_key=BOB)] == ["Bob likes tea."]
    assert [m.text for m in await store.list_memories(user_key=ALICE)] == ["Alice has a cat."]
