"""SQLite's grouped commits: a burst of writes shares COMMITs, each caller returns only once its
write is committed, a failing operation loses only itself, reads use their own connection."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from core.store.sqlite.store import SQLiteStore


def committed_marks(path: Path) -> set[str]:
    """Marks another connection sees: only what was committed."""
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT mark FROM marks")}


async def test_a_burst_of_writes_is_committed_in_groups_each_caller_after_its_commit(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(str(db_path))
    commits = 0
    real_commit = store._commit_open_group

    async def counting_commit() -> None:
        nonlocal commits
        if store._group is not None:
            commits += 1
        await real_commit()

    store._commit_open_group = counting_commit  # type: ignore[method-assign]

    async def one(i: int) -> None:
        assert await store.mark_once(mark=f"m{i}")
        # Returned from the write: committed, visible to another connection.
        assert f"m{i}" in await asyncio.to_thread(committed_marks, db_path)

    try:
        await asyncio.gather(*(one(i) for i in range(100)))
    finally:
        await store.close()
    assert committed_marks(db_path) == {f"m{i}" for i in range(100)}
    assert 1 <= commits < 100 / 2, commits


async def test_a_failing_operation_in_a_group_is_rolled_back_alone(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))

    async def good(i: int) -> None:
        await store.mark_once(mark=f"ok{i}")

    async def bad() -> None:
        async with store._write() as conn:
            await conn.execute("INSERT INTO marks(mark, at) VALUES ('bad', 'now')")
            await conn.execute("INSERT INTO no_such_table VALUES (1)")

    try:
        results = await asyncio.gather(
            *(good(i) for i in range(10)),
            bad(),
            *(good(i) for i in range(10, 20)),
            return_exceptions=True,
        )
    finally:
        await store.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.OperationalError)
    assert committed_marks(db_path) == {f"ok{i}" for i in range(20)}


async def test_a_cancelled_waiter_does_not_strand_the_open_group(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))
    try:
        first = asyncio.create_task(store.mark_once(mark="first"))
        waiter = asyncio.create_task(store.mark_once(mark="cancelled"))
        await asyncio.sleep(0)
        waiter.cancel()
        assert await asyncio.wait_for(first, 10)
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert "first" in committed_marks(db_path)
    finally:
        await store.close()


async def test_reads_outside_a_write_use_the_read_connection_and_see_commits(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(str(db_path))
    try:
        assert store._reader is not None and store._read_conn() is store._reader
        await store.set_mode(user_key="cli:a", mode="off")
        assert await store.get_mode(user_key="cli:a") == "off"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await store._reader.execute("DELETE FROM marks")
        async with store._write():
            assert store._read_conn() is store._conn
    finally:
        await store.close()


async def test_memory_store_keeps_one_connection() -> None:
    store = await SQLiteStore.open(":memory:")
    try:
        assert store._reader is None
        assert await store.mark_once(mark="x")
        assert not await store.mark_once(mark="x")
    finally:
        await store.close()


async def test_urgent_writers_go_ahead_of_waiting_ones(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))
    order: list[str] = []

    async def write(name: str, *, urgent: bool) -> None:
        async with store._write(urgent=urgent) as conn:
            await conn.execute("INSERT INTO marks(mark, at) VALUES (?, 'now')", (name,))
            order.append(name)

    try:
        holder = asyncio.create_task(write("first", urgent=False))
        await asyncio.sleep(0)  # holds the lock
        normal = [asyncio.create_task(write(f"n{i}", urgent=False)) for i in range(3)]
        await asyncio.sleep(0)
        urgent = asyncio.create_task(write("urgent", urgent=True))
        await asyncio.gather(holder, *normal, urgent)
    finally:
        await store.close()
    assert order[:2] == ["first", "urgent"], order
    assert committed_marks(db_path) == {"first", "urgent", "n0", "n1", "n2"}
