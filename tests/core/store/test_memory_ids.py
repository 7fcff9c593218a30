"""Memory ids are never reused (issue 26): a forgotten, purged or undone memory's id is never
given to a new memory, on either backend, also after a restart and for a store made before
SQLite's m011 (which rebuilt ``memories`` with AUTOINCREMENT)."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from core.memory.service import MemoryService
from core.rules.cleanup_ops import MergeOp
from core.rules.dedupe import Deduper
from core.runtime import open_store
from core.store.migrations import Migration
from core.store.seams import Store
from core.store.sqlite import base as sqlite_base
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, utcnow

ALICE, BOB = "cli:alice", "cli:bob"


async def test_a_forgotten_id_is_never_given_to_a_new_memory(store: Store) -> None:
    service = MemoryService(store)
    first = await service.remember(user_key=ALICE, text="The user has a dog called Rex.")
    await service.forget(user_key=ALICE, memory_id=first.id)
    second = await service.remember(user_key=ALICE, text="The user plays the cello.")
    assert second.id != first.id and second.id > first.id
    # The history names each id for one memory only.
    events = [(e.memory_id, e.event) for e in await service.history(user_key=ALICE)]
    assert events == [(first.id, "added"), (first.id, "forgotten"), (second.id, "added")]
    # After a forget-all, a bulk import, and another user, still never an id seen before.
    await service.forget_all(user_key=ALICE)
    lines = [json.dumps({"text": f"The user owns {n} kites."}) for n in range(3)]
    await service.import_lines(user_key=ALICE, lines=lines)
    third = await service.remember(user_key=BOB, text="The user likes tea.")
    ids = [m.id for m in await service.list_memories(user_key=ALICE)] + [third.id]
    assert min(ids) > second.id and len(set(ids)) == 4


async def test_an_undone_merge_does_not_free_its_id(store: Store) -> None:
    deduper = Deduper()
    a = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user likes vim."), dedupe=deduper
    )
    b = await store.add(
        user_key=ALICE, memory=NewMemory(text="The user edits code in vim."), dedupe=deduper
    )
    op = MergeOp(ids=(a.id, b.id), text="The user edits code in vim.", kind="fact", category="code")
    applied = await store.apply_change(user_key=ALICE, change_id="c1", ops=[op])
    (merged,) = applied.added
    await store.undo_change(user_key=ALICE, change_id="c1")  # deletes the merged memory
    after = await store.add(user_key=ALICE, memory=NewMemory(text="The user runs."), dedupe=deduper)
    assert after.id > merged


async def test_ids_stay_used_across_a_restart(db_url: str) -> None:
    store = await open_store(db_url)
    service = MemoryService(store)
    added = [
        (await service.remember(user_key=ALICE, text=f"The user met {n} owls.")).id
        for n in range(3)
    ]
    await service.forget(user_key=ALICE, memory_id=added[-1])  # the largest id goes
    await store.close()
    store = await open_store(db_url)
    try:
        new = await MemoryService(store).remember(user_key=ALICE, text="The user sails.")
    finally:
        await store.close()
    assert new.id > added[-1]


IDS_MIGRATION = "m011_ids_never_reused"


def _before_ids_migration() -> list[Migration]:
    # Every other migration: the store code that fills the old store needs later tables.
    return [m for m in sqlite_base.MIGRATIONS if m[1] != IDS_MIGRATION]


async def test_the_ids_migration_rebuilds_an_existing_store_keeping_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "old.db")
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_base, "MIGRATIONS", _before_ids_migration())
        old = await SQLiteStore.open(path)
        service = MemoryService(old)
        keep = await service.remember(user_key=ALICE, text="The user keeps bees in Leeds.")
        await service.remember(user_key=BOB, text="The user keeps bees in York.")
        tea = await service.remember(user_key=ALICE, text="The user drinks black tea.")
        await old.add(
            user_key=ALICE,
            memory=NewMemory(text="The user drinks green tea."),
            dedupe=Deduper(),
            supersedes=[tea.id],
        )
        gone = await service.remember(user_key=ALICE, text="The user hates parsnips.")
        await service.forget(user_key=ALICE, memory_id=gone.id)  # largest id: history only
        # A pending cleanup plan shows an id larger than any the tables hold.
        await old.put_pending(
            token="plan-token-1",
            user_key=ALICE,
            kind="cleanup_plan",
            payload=json.dumps({"texts": {str(gone.id + 40): "x"}, "planned": []}),
            expires_at=utcnow() + timedelta(minutes=5),
        )
        before = {
            "history": await service.history(user_key=ALICE),
            "alice": await service.list_memories(user_key=ALICE),
            "count": await service.count(user_key=ALICE),
        }
        await old.close()
    store = await SQLiteStore.open(path)
    try:
        service = MemoryService(store)
        assert IDS_MIGRATION in await store.applied_migrations()
        assert await service.history(user_key=ALICE) == before["history"]
        assert await service.list_memories(user_key=ALICE) == before["alice"]
        assert await service.count(user_key=ALICE) == before["count"] == 2
        # Recall (FTS5 shards, BM25 counts) and its triggers work as before.
        (hit,) = await service.search(user_key=ALICE, query="bees", k=3)
        assert hit.memory.id == keep.id
        new = await service.remember(user_key=ALICE, text="The user grows leeks.")
        assert new.id == gone.id + 41  # after every id the store has named
        assert await service.count(user_key=ALICE) == 3
        await service.forget(user_key=ALICE, memory_id=keep.id)
        assert await service.search(user_key=ALICE, query="bees", k=3) == []
        assert [s.memory.text for s in await service.search(user_key=BOB, query="bees", k=3)] == [
            "The user keeps bees in York."
        ]
    finally:
        await store.close()
    await assert_rebuilt_as_new(path, tmp_path / "fresh.db", "memories")


async def assert_rebuilt_as_new(path: str, fresh_path: Path, table: str) -> None:
    """The file at ``path`` is sound, and its ``table`` has AUTOINCREMENT and the same
    definition, indexes and triggers as a store created new (at ``fresh_path``)."""
    shape = "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = ? ORDER BY name"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        assert "AUTOINCREMENT" in ddl[0]
        rebuilt = conn.execute(shape, (table,)).fetchall()
    fresh = await SQLiteStore.open(str(fresh_path))
    await fresh.close()
    with sqlite3.connect(fresh_path) as conn:
        assert rebuilt == conn.execute(shape, (table,)).fetchall()


async def test_a_new_store_has_autoincrement_ids(sqlite_store: SQLiteStore) -> None:
    rows = await sqlite_store._fetchall("SELECT sql FROM sqlite_master WHERE name = 'memories'")
    assert "AUTOINCREMENT" in rows[0][0]
