"""Store states tests start from: a full disk, as the intake tests meet it (the SQLite file
can grow no more); a database another process holds locked; a user turn answered and waiting
for its reflection."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from core.store.seams import Store
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn, utcnow


async def fill_disk(store: SQLiteStore) -> None:
    """The database file can grow no more: SQLite then answers "database or disk is full"
    to any write that needs a new page (SQLITE_FULL, as on a full disk). The file's free
    pages (a migration that rebuilt a table leaves some) are given back first, so a write
    cannot fit in them either."""
    free = next(iter(await store._conn.execute_fetchall("PRAGMA freelist_count")))[0]
    if free:
        await store._conn.execute("VACUUM")
    rows = await store._conn.execute_fetchall("PRAGMA page_count")
    await store._conn.execute(f"PRAGMA max_page_count = {next(iter(rows))[0]}")


async def free_disk(store: SQLiteStore) -> None:
    """Room again: the file may grow to SQLite's default maximum."""
    await store._conn.execute("PRAGMA max_page_count = 1073741823")


@asynccontextmanager
async def locked_by_another_process(store: SQLiteStore) -> AsyncIterator[Callable[[], None]]:
    """Another process holds the database's write lock (a connection of its own inside
    ``BEGIN IMMEDIATE``) and the store waits only 0.1 s for it; the function given releases
    the lock."""
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        await store._conn.execute("PRAGMA busy_timeout = 100")
        other.execute("BEGIN IMMEDIATE")
        yield lambda: other.execute("ROLLBACK").close()
    finally:
        other.close()


async def pending_turn(store: Store, user_key: str = "slack:T1:U1") -> int:
    """A DM turn of ``user_key`` answered ("Noted.") whose reflection is pending; its id."""
    turn_id = await store.add_turn(
        turn=NewTurn(
            conversation_key=f"dm:{user_key}",
            user_key=user_key,
            role="user",
            text="I moved to Berlin, and I like green tea.",
            origin="private",
            sent_at=utcnow(),
            reflection="answering",
            workspace="T1",
        )
    )
    await store.finish_turn(turn_id=turn_id, answer="Noted.")
    return turn_id
