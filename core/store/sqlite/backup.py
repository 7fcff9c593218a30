"""A consistent copy of a SQLite store, taken while bots write to it (``selfmind db backup``,
and ``selfmind db migrate`` before it changes the file)."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite

from core.errors import MemoryInputError


def before_migrate_path(source: Path, now: datetime | None = None) -> Path:
    """Where ``db migrate`` puts its backup: beside the store, named for the time (UTC),
    e.g. ``memory.db`` -> ``memory-before-migrate-20261202T063000Z.db``."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return source.with_name(f"{source.stem}-before-migrate-{stamp}{source.suffix}")


async def backup_file(source: Path, target: Path) -> int:
    """Write a consistent copy of the existing store ``source`` to the new file ``target``
    (mode 0600) with SQLite's online backup API, then check it (``PRAGMA
    integrity_check``). Returns the copy's page count. ``MemoryInputError`` when ``target``
    is the store itself, exists or cannot be created; a copy that fails its check is
    removed."""
    source, target = await asyncio.to_thread(lambda: (source.resolve(), target.resolve()))
    if source == target:
        raise MemoryInputError(f"{target} is the database itself: give another path")
    try:
        # Created here, exclusively and private: an existing file is never overwritten.
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise MemoryInputError(f"cannot create {target}: {exc.strerror}") from None
    try:
        # mode=rw: never creates the source; the bot's writers go on during the copy (WAL).
        async with (
            aiosqlite.connect(f"{source.as_uri()}?mode=rw", uri=True) as src,
            aiosqlite.connect(target) as dst,
        ):
            await src.execute("PRAGMA busy_timeout = 10000")
            await src.backup(dst)
            async with dst.execute("PRAGMA integrity_check") as cursor:
                verdict = [row[0] for row in await cursor.fetchall()]
            async with dst.execute("PRAGMA page_count") as cursor:
                row = await cursor.fetchone()
        if verdict != ["ok"]:
            raise MemoryInputError(f"the backup failed its integrity check: {verdict[0]}")
    except BaseException:
        for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            leftover.unlink(missing_ok=True)
        raise
    return int(row[0]) if row else 0
