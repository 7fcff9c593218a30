"""SQLite's writer: a burst of writes shares COMMITs, each group one call on the database
thread, each caller returns only once its write is committed, a failing operation loses only
itself, a full disk or a locked file fails the group with the driver's error and loses nothing
confirmed, reads use their own connection."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import StoreError
from core.store.sqlite import base
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn, utcnow
from tests.store_helpers import locked_by_another_process


def write_mark(mark: str) -> Callable[[sqlite3.Connection], None]:
    def op(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO marks(mark, at) VALUES (?, 'now')", (mark,))

    return op


def turn(text: str) -> NewTurn:
    return NewTurn(
        conversation_key="cli:c",
        user_key="cli:a",
        role="user",
        text=text,
        origin="private",
        sent_at=utcnow(),
        reflection="answering",
    )


def committed_marks(path: Path) -> set[str]:
    """Marks another connection sees: only what was committed."""
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT mark FROM marks")}


async def test_a_burst_of_writes_is_committed_in_groups_each_caller_after_its_commit(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await SQLiteStore.open(str(db_path))
    groups: list[int] = []
    real_group = base._run_group

    def counting_group(conn: sqlite3.Connection, ops: list[object]) -> list[tuple[bool, object]]:
        # The whole transaction, BEGIN to COMMIT, is this one call on the database thread:
        # the event loop (this thread's) never runs while the write lock is held.
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()
        assert threading.current_thread() is not threading.main_thread()
        assert not conn.in_transaction
        groups.append(len(ops))
        outcomes = real_group(conn, ops)  # type: ignore[arg-type]
        assert not conn.in_transaction
        return outcomes

    monkeypatch.setattr(base, "_run_group", counting_group)

    async def one(i: int) -> None:
        assert await store.mark_once(mark=f"m{i}")
        # Returned from the write: committed, visible to another connection.
        assert f"m{i}" in await asyncio.to_thread(committed_marks, db_path)

    try:
        await asyncio.gather(*(one(i) for i in range(100)))
    finally:
        await store.close()
    assert committed_marks(db_path) == {f"m{i}" for i in range(100)}
    assert sum(groups) == 100 and 1 <= len(groups) < 100 / 2, groups
    assert max(groups) <= base.GROUP_MAX_OPS


async def test_a_failing_operation_in_a_group_is_rolled_back_alone(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))

    async def good(i: int) -> None:
        await store.mark_once(mark=f"ok{i}")

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO marks(mark, at) VALUES ('bad', 'now')")
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    try:
        results = await asyncio.gather(
            *(good(i) for i in range(10)),
            store._run(bad),
            *(good(i) for i in range(10, 20)),
            return_exceptions=True,
        )
    finally:
        await store.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], StoreError)
    assert isinstance(errors[0].__cause__, sqlite3.OperationalError)
    assert committed_marks(db_path) == {f"ok{i}" for i in range(20)}


async def test_disk_full_fails_the_whole_group_and_loses_nothing_confirmed(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))
    try:
        assert await store.receive_turn(claim_keys=["before"], turn=turn("kept")) is not None
        pages = next(iter(await store._conn.execute_fetchall("PRAGMA page_count")))[0]
        await store._conn.execute(f"PRAGMA max_page_count = {pages}")
        results = await asyncio.gather(
            *(store.receive_turn(claim_keys=[f"ev{i}"], turn=turn("x" * 20_000)) for i in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(r, StoreError) for r in results), results
        assert all("full" in str(r) for r in results)
        assert [t.text for t in await store.recent_turns(conversation_key="cli:c", limit=9)] == [
            "kept"
        ]
        # Room again: the refused events are received now (their claims went with them).
        await store._conn.execute("PRAGMA max_page_count = 1073741823")
        assert await store.receive_turn(claim_keys=["ev0"], turn=turn("later")) is not None
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        texts = [r[0] for r in conn.execute("SELECT text FROM turns ORDER BY id")]
    assert texts == ["kept", "later"]


async def test_a_database_locked_by_another_process_fails_the_write_with_a_clear_error(
    db_path: Path,
) -> None:
    store = await SQLiteStore.open(str(db_path))
    try:
        async with locked_by_another_process(store) as release:
            with pytest.raises(StoreError, match="locked"):
                await store.receive_turn(claim_keys=["ev"], turn=turn("waiting"))
            # Reads go on meanwhile (WAL): the reader does not wait for the lock holder.
            assert await store.recent_turns(conversation_key="cli:c", limit=9) == []
            release()
            assert await store.receive_turn(claim_keys=["ev"], turn=turn("stored")) is not None
    finally:
        await store.close()


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
    release = asyncio.Event()

    def write(name: str) -> Callable[[sqlite3.Connection], None]:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO marks(mark, at) VALUES (?, 'now')", (name,))
            order.append(name)

        return op

    async def holder() -> None:
        async with store._write() as conn:  # a rare async-bodied write holds the lock
            await conn.execute("INSERT INTO marks(mark, at) VALUES ('first', 'now')")
            order.append("first")
            await release.wait()

    try:
        held = asyncio.create_task(holder())
        await asyncio.sleep(0.05)
        normal = [asyncio.create_task(store._run(write(f"n{i}"))) for i in range(3)]
        await asyncio.sleep(0)
        urgent = asyncio.create_task(store._run(write("urgent"), urgent=True))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(held, *normal, urgent)
    finally:
        await store.close()
    assert order[:2] == ["first", "urgent"], order
    assert committed_marks(db_path) == {"first", "urgent", "n0", "n1", "n2"}


async def test_a_closed_store_refuses_writes(db_path: Path) -> None:
    store = await SQLiteStore.open(str(db_path))
    pending = asyncio.create_task(store._run(write_mark("in flight")))
    await asyncio.sleep(0)
    await store.close()
    await pending  # queued before close: written
    with pytest.raises(StoreError):
        await store._run(write_mark("after"))
    assert committed_marks(db_path) == {"in flight"}


async def test_a_write_cancelled_at_its_begin_leaves_no_transaction_for_the_next_group(
    db_path: Path,
) -> None:
    # A _write() cancelled while its BEGIN IMMEDIATE is queued on the database thread: the
    # BEGIN still runs there after the lock is released. Unless it is rolled back, the next
    # group (other users' writes, an acknowledgement's among them) fails with "cannot start
    # a transaction within a transaction".
    store = await SQLiteStore.open(str(db_path))
    try:

        async def memory_write() -> None:
            async with store._write():
                await asyncio.sleep(3600)  # pragma: no cover - cancelled at its BEGIN

        task = asyncio.create_task(memory_write())
        await asyncio.sleep(0)  # it holds the lock and awaits its BEGIN
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.mark_once(mark="after")
        async with store._write() as conn:
            await conn.execute("INSERT INTO marks(mark, at) VALUES ('rare', 'now')")
    finally:
        await store.close()
    assert committed_marks(db_path) == {"after", "rare"}


async def test_close_runs_writes_left_queued_by_a_cancelled_writer(db_path: Path) -> None:
    # The writer task cancelled (asyncio.run's shutdown cancels every task) while a group
    # runs on the thread: what was queued behind that group must still be written, or fail,
    # at close; its caller must not wait forever.
    store = await SQLiteStore.open(str(db_path))
    started = threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        started.set()
        threading.Event().wait(0.2)
        write_mark("slow")(conn)

    first = asyncio.create_task(store._run(slow))
    await asyncio.to_thread(started.wait, 5)
    behind = asyncio.create_task(store._run(write_mark("behind")))
    await asyncio.sleep(0)
    assert store._writer is not None
    store._writer.cancel()
    await asyncio.gather(first, return_exceptions=True)
    await store.close()
    done, _ = await asyncio.wait([behind], timeout=5)
    assert done and behind.result() is None
    assert committed_marks(db_path) == {"slow", "behind"}
