"""Erasure: once ``forget`` returns, a forgotten memory's text is in no table, no index and
no file. SQLite: the raw bytes of ``memory.db``, ``-wal`` and ``-shm`` are searched for the
marker word, its stem and its FTS5 index term while the store stays open (the long-running
bot) and after close (the CLI). PostgreSQL: no row holds the text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from core.errors import StoreError
from core.memory.service import MemoryService
from core.rules.cleanup_ops import UNDO_WINDOW, RetireOp, SupersedeOp
from core.rules.text import index_terms, stem
from core.store.seams import Store
from core.store.sqlite.base import ts
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn, utcnow
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import harness

USER = "slack:T1:U1"
OTHER = "discord:42"
MARKER = "zorblaxians"  # stem: zorblaxian


def _needles(uid: int) -> list[bytes]:
    forms = {MARKER, stem(MARKER), *index_terms(uid, MARKER)}
    return [f.encode() for f in forms]


def _traces(db: Path, needles: list[bytes]) -> dict[str, list[bytes]]:
    found: dict[str, list[bytes]] = {}
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(db) + suffix)
        if path.exists():
            data = path.read_bytes()
            hits = [n for n in needles if n in data]
            if hits:
                found[path.name] = hits
    return found


async def _fill(service: MemoryService) -> None:
    """Other users' memories and the user's own, so the index has segments to rewrite."""
    for i in range(40):
        await service.remember(user_key=OTHER, text=f"The user keeps {i} ferrets called Nib.")
        await service.remember(user_key=USER, text=f"The user owns {i} bicycles in Leeds.")


async def _uid(store: SQLiteStore, user_key: str) -> int:
    row = await store._fetchone("SELECT uid FROM users WHERE user_key = ?", (user_key,))
    assert row is not None
    return int(row[0])


async def test_forget_one_leaves_no_byte_in_any_file(sqlite_store: SQLiteStore) -> None:
    service = MemoryService(sqlite_store)
    await _fill(service)
    added = await service.remember(user_key=USER, text=f"The user breeds {MARKER} on Mars.")
    needles = _needles(await _uid(sqlite_store, USER))
    # The word is really there before (so the search below can fail).
    assert _traces(Path(sqlite_store.path), needles)
    await service.forget(user_key=USER, memory_id=added.id)
    assert _traces(Path(sqlite_store.path), needles) == {}  # store still open: the bot
    assert await service.search(user_key=USER, query="bicycles Leeds", k=3)
    assert await service.count(user_key=OTHER) == 40
    await sqlite_store.close()
    assert _traces(Path(sqlite_store.path), needles) == {}  # closed: the CLI


async def test_import_then_forget_all_leaves_no_byte(sqlite_store: SQLiteStore) -> None:
    service = MemoryService(sqlite_store)
    await _fill(service)
    lines = [json.dumps({"text": f"The user met {MARKER} number {i}."}) for i in range(300)]
    result = await service.import_lines(user_key=USER, lines=lines)
    assert result.added == 300
    needles = _needles(await _uid(sqlite_store, USER))
    assert _traces(Path(sqlite_store.path), needles)
    assert await service.forget_all(user_key=USER) == 340
    assert _traces(Path(sqlite_store.path), needles) == {}
    assert await service.count(user_key=USER) == 0
    assert await service.count(user_key=OTHER) == 40
    hits = await service.search(user_key=OTHER, query="ferrets", k=6)
    assert len(hits) == 6


async def test_a_reader_holding_an_older_snapshot_delays_the_erasure_by_one_retry_only(
    sqlite_store: SQLiteStore,
) -> None:
    # Another connection (another process: the CLI, a backup, a sqlite3 shell) reads in a
    # transaction that began before the forget. Its snapshot blocks the WAL truncation, and
    # it may still read the text; once it ends, the text leaves -wal and the file within
    # one retry (WAL_RETRY_S in production; shortened here), with no further forget.
    sqlite_store.wal_retry_s = 0.05
    service = MemoryService(sqlite_store)
    await _fill(service)
    added = await service.remember(user_key=USER, text=f"The user breeds {MARKER} on Mars.")
    needles = _needles(await _uid(sqlite_store, USER))
    path = Path(sqlite_store.path)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM memories").fetchone() == (81,)
        await service.forget(user_key=USER, memory_id=added.id)
        await asyncio.sleep(0.2)  # several retries, all blocked
        assert _traces(path, needles)  # still there: the reader's snapshot holds it
        assert reader.execute("SELECT count(*) FROM memories").fetchone() == (81,)
        reader.execute("COMMIT")
        released = time.monotonic()
        for _ in range(300):  # at most 3 s (a retry every 0.05 s)
            if not _traces(path, needles):
                break
            await asyncio.sleep(0.01)
        assert _traces(path, needles) == {}
        assert time.monotonic() - released < 1
        assert os.path.getsize(str(path) + "-wal") == 0
    finally:
        reader.close()
    # The bot goes on as usual: a later write, a later forget.
    await service.remember(user_key=USER, text="The user sails on Sundays.")
    assert await service.count(user_key=USER) == 41


async def test_a_reader_blocking_the_erasure_for_long_gets_one_warning_without_the_text(
    sqlite_store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    sqlite_store.wal_retry_s = 0.02
    sqlite_store.wal_blocked_warn_s = 0.1  # WAL_BLOCKED_WARN_S (60 s) in production
    service = MemoryService(sqlite_store)
    added = await service.remember(user_key=USER, text=f"The user breeds {MARKER} on Mars.")
    reader = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM memories").fetchone()
        with caplog.at_level(logging.DEBUG, logger="core.store.sqlite.base"):
            await service.forget(user_key=USER, memory_id=added.id)
            await asyncio.sleep(0.4)  # about 20 blocked retries, past the warning's time
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "read transaction" in warnings[0].getMessage()
        assert MARKER not in caplog.text
    finally:
        reader.execute("COMMIT")
        reader.close()


async def test_closing_tries_a_blocked_truncation_once_more(sqlite_store: SQLiteStore) -> None:
    sqlite_store.wal_retry_s = 3600.0  # no retry before the close
    service = MemoryService(sqlite_store)
    added = await service.remember(user_key=USER, text=f"The user breeds {MARKER} on Mars.")
    needles = _needles(await _uid(sqlite_store, USER))
    reader = sqlite3.connect(sqlite_store.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM memories").fetchone()
    await service.forget(user_key=USER, memory_id=added.id)
    assert _traces(Path(sqlite_store.path), needles)
    reader.execute("COMMIT")
    try:
        await sqlite_store.close()  # the retry task is not left pending; the close truncates
        # (checked before the reader, now the last connection, closes and removes the WAL)
        assert _traces(Path(sqlite_store.path), needles) == {}
    finally:
        reader.close()


async def test_forgotten_embedding_and_events_go(store: Store) -> None:
    service = MemoryService(store)
    first = await service.remember(user_key=USER, text=f"The user studies {MARKER}.")
    second = await service.remember(user_key=USER, text="The user studies moths at night.")
    ops = [SupersedeOp(old_id=second.id, new_id=first.id)]
    assert (await store.apply_change(user_key=USER, change_id="c1", ops=ops)).superseded
    await store.put_embeddings(user_key=USER, model="m", items=[(first.id, b"\x00" * 8)])
    # Recalled into an answer and confirmed by a second /remember: uses of its own.
    await service.remember(user_key=USER, text=f"The user studies {MARKER}.")
    turn_id = await store.add_turn(turn=NewTurn(
        conversation_key="c", user_key=USER, role="user", text="Hi", origin="private",
        sent_at=utcnow(), reflection="answering",
    ))  # fmt: skip
    await store.finish_turn(turn_id=turn_id, answer="Hello.", recalled=[first.id, second.id])
    assert (await store.memory_uses(user_key=USER))[first.id].confirmations == 1
    await service.forget(user_key=USER, memory_id=first.id)
    assert set(await store.memory_uses(user_key=USER)) == {second.id}
    assert await store.memories_without_embedding(model="m", user_key=USER) == []
    assert await store.active_embeddings(user_key=USER, model="m") == []
    events = await store.history(user_key=USER)
    # The superseded event no longer points at the erased memory.
    assert [e.related_id for e in events if e.event == "superseded"] == [None]
    assert [e.memory_id for e in events if e.event == "forgotten"] == [first.id]


async def test_postgres_rows_hold_no_text_after_forget(store: Store, backend: str) -> None:
    if backend != "postgres":
        pytest.skip("the SQLite file bytes are checked above")
    from core.store.postgres.store import PostgresStore

    assert isinstance(store, PostgresStore)
    service = MemoryService(store)
    kept = await service.remember(user_key=USER, text="The user grows tomatoes.")
    gone = await service.remember(user_key=USER, text=f"The user hums {MARKER} songs.")
    await service.import_lines(user_key=OTHER, lines=[json.dumps({"text": f"{MARKER} ahoy."})])
    await service.forget(user_key=USER, memory_id=gone.id)
    await service.forget_all(user_key=OTHER)
    pattern = f"%{stem(MARKER)}%"
    for table, column in (("memories", "text"), ("memories", "norm"), ("memories", "terms")):
        n = await store._fetchval(f"SELECT count(*) FROM {table} WHERE {column} ILIKE $1", pattern)
        assert n == 0, table
    assert (
        await store._fetchval(
            "SELECT count(*) FROM memory_events e WHERE e::text ILIKE $1", pattern
        )
        == 0
    )
    assert (await service.list_memories(user_key=USER))[0].id == kept.id


async def test_retired_text_erased_after_undo_window(
    store: Store, backend: str, db_path: Path
) -> None:
    service = MemoryService(store)
    await service.remember(user_key=USER, text="The user sails on Sundays.")
    old = await service.remember(user_key=USER, text=f"The user collects {MARKER}.")
    await store.apply_change(user_key=USER, change_id="c1", ops=[RetireOp(memory_id=old.id)])
    # Inside the window nothing goes and the change can be undone.
    assert await store.purge_retired(older_than=utcnow() - UNDO_WINDOW) == 0
    assert await store.undo_change(user_key=USER, change_id="c1") == 1
    await store.apply_change(user_key=USER, change_id="c2", ops=[RetireOp(memory_id=old.id)])
    assert await store.purge_retired(older_than=utcnow() + timedelta(seconds=1)) == 1
    assert await store.get(user_key=USER, memory_id=old.id) is None
    with pytest.raises(StoreError, match="undo window"):
        await store.undo_change(user_key=USER, change_id="c2")
    assert await service.count(user_key=USER) == 1
    if backend == "sqlite":
        assert isinstance(store, SQLiteStore)
        needles = _needles(await _uid(store, USER))
        assert _traces(Path(store.path), needles) == {}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as f:
        yield f


async def test_running_bot_erases_retired_memories_after_the_window(
    fake: FakeAnthropic, db_path: Path
) -> None:
    async with harness(fake, db_path) as h:
        assert isinstance(h.store, SQLiteStore)
        await h.service.remember(user_key=USER, text="The user sails on Sundays.")
        old = await h.service.remember(user_key=USER, text=f"The user collects {MARKER}.")
        await h.store.apply_change(user_key=USER, change_id="c3", ops=[RetireOp(old.id)])
        needles = _needles(await _uid(h.store, USER))
        await h.loop._maybe_prune(force=True)  # inside the window: kept for undo
        assert await h.store.get(user_key=USER, memory_id=old.id) is not None
        aged = utcnow() - UNDO_WINDOW - timedelta(hours=1)
        await h.store._conn.execute(
            "UPDATE memories SET superseded_at = ? WHERE id = ?", (ts(aged), old.id)
        )
        await h.loop._maybe_prune(force=True)
        assert await h.store.get(user_key=USER, memory_id=old.id) is None
        assert _traces(db_path, needles) == {}
        assert await h.service.count(user_key=USER) == 1
