"""SQLite's small reads of every turn (a memory by id, the memory count, the last memory event,
a page of the profile's size) run on the event loop's thread with no hop to the reader's; a
read past its budget, or one that would wait for a lock, runs on the reader's thread instead,
so the event loop never waits."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.rules.dedupe import Deduper
from core.store.sqlite import base
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory

ALICE = "slack:T1:U1"
TEXTS = [f"Alice keeps note number {i} about her garden." for i in range(40)]


async def filled(path: Path) -> SQLiteStore:
    store = await SQLiteStore.open(str(path))
    await store.add_many(user_key=ALICE, memories=[NewMemory(text=t) for t in TEXTS], dedupe=None)
    return store


def hops_of(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every read that goes to the reader's thread (``_fetchall``) from now on."""
    hops: list[str] = []
    real = store._fetchall

    async def spied(sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        hops.append(sql)
        return await real(sql, params)

    monkeypatch.setattr(store, "_fetchall", spied)
    return hops


async def test_the_turns_small_reads_take_no_hop(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await filled(db_path)
    try:
        hops = hops_of(store, monkeypatch)
        newest = await store.list_memories(user_key=ALICE, limit=10)
        assert [m.text for m in newest] == TEXTS[::-1][:10]
        assert await store.count(user_key=ALICE) == 40
        assert await store.count(user_key=ALICE, one_copy=True) == 40
        assert await store.get(user_key=ALICE, memory_id=newest[0].id) == newest[0]
        assert await store.get(user_key="slack:T1:U2", memory_id=newest[0].id) is None
        assert await store.memory_head(user_key=ALICE) > 0
        assert hops == []
        # A longer page goes to the reader's thread (it would hold up the event loop).
        assert len(await store.list_memories(user_key=ALICE, limit=base.NOW_ROWS + 1)) == 40
        assert len(hops) == 1
    finally:
        await store.close()


async def test_a_read_past_its_budget_is_stopped_and_run_on_the_reader_thread(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await filled(db_path)
    try:
        expected = await store.list_memories(user_key=ALICE, limit=40)
        hops = hops_of(store, monkeypatch)
        monkeypatch.setattr(base, "NOW_STEPS", 0)  # stopped at its first check
        assert await store.list_memories(user_key=ALICE, limit=40) == expected
        assert len(hops) == 1  # stopped on the event loop's thread, run again on the reader's
        assert await store.count(user_key=ALICE) == 40  # a short one still takes no hop
        assert len(hops) == 1
    finally:
        await store.close()


def busy_error(tmp_path: Path) -> sqlite3.OperationalError:
    """SQLite's own ``SQLITE_BUSY``: a file another connection holds exclusively, read
    without waiting."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    reader = sqlite3.connect(path, timeout=0)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError) as caught:
            reader.execute("SELECT * FROM t").fetchall()
        assert caught.value.sqlite_errorcode == sqlite3.SQLITE_BUSY
        return caught.value
    finally:
        reader.close()
        holder.close()


class BusyConnection:
    """The event loop thread's connection while another process holds a lock on the file."""

    def __init__(self, error: sqlite3.OperationalError) -> None:
        self.error = error

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        raise self.error

    def close(self) -> None:
        pass


async def test_a_read_that_would_wait_for_a_lock_waits_on_the_reader_thread(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await filled(db_path)
    real = store._now
    try:
        hops = hops_of(store, monkeypatch)
        store._now = BusyConnection(busy_error(tmp_path))  # type: ignore[assignment]
        assert await store.count(user_key=ALICE) == 40
        assert len(hops) == 1
    finally:
        store._now = real
        await store.close()


async def test_reads_inside_a_write_see_its_rows(db_path: Path) -> None:
    store = await filled(db_path)
    try:
        async with store._write() as conn:
            await conn.execute("UPDATE users SET n_docs = 99 WHERE user_key = ?", (ALICE,))
            assert await store.count(user_key=ALICE) == 99  # the writer's own, not committed
            await conn.execute("UPDATE users SET n_docs = 40 WHERE user_key = ?", (ALICE,))
        assert await store.count(user_key=ALICE) == 40
    finally:
        await store.close()


async def test_a_closed_store_has_no_connection_left(db_path: Path) -> None:
    store = await filled(db_path)
    now = store._now
    assert now is not None
    await store.close()
    assert store._now is None
    with pytest.raises(sqlite3.ProgrammingError):
        now.execute("SELECT 1")


async def test_memory_store_reads_on_its_one_connection() -> None:
    store = await SQLiteStore.open(":memory:")
    try:
        assert store._now is None
        await store.add(user_key=ALICE, memory=NewMemory(text="Alice has a cat."), dedupe=Deduper())
        assert await store.count(user_key=ALICE) == 1
    finally:
        await store.close()
