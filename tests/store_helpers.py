"""A full disk, as the intake tests meet it: the SQLite file can grow no more."""

from __future__ import annotations

from core.store.sqlite.store import SQLiteStore


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
