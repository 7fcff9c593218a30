"""A consistent copy of a SQLite store, taken while bots write to it (``selfmind db backup``,
and ``selfmind db migrate`` before it changes the file)."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite

from core.errors import MemoryInputError
from core.store.sqlite.base import DB_FILE_SUFFIXES


def before_migrate_path(source: Path, now: datetime | None = None) -> Path:
    """Where ``db migrate`` puts its backup: beside the store, named for the time (UTC),
    e.g. ``memory.db`` -> ``memory-before-migrate-20261202T063000Z.db``."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return source.with_name(f"{source.stem}-before-migrate-{stamp}{source.suffix}")


def restore_hint(backup: Path, database: Path) -> str:
    """How to put ``backup`` (taken by ``db migrate``) back in place of ``database``: the
    line ``db migrate`` prints under the backup's name (docs/operating.md, Rolling back)."""
    return (
        f"to undo this upgrade: stop every SelfMind process, delete {database.name}-wal and"
        f" {database.name}-shm beside it if present, run: mv {backup} {database}, and"
        " reinstall the SelfMind you had"
    )


SIDE_SUFFIXES = tuple(suffix for suffix in DB_FILE_SUFFIXES if suffix)
"""``-wal``, ``-shm``, ``-journal``: names SQLite gives the side files of a database."""


def new_file(target: Path) -> Path:
    """``target`` as an absolute path for a new backup file: its folder resolved, the file
    itself not (a symbolic link is never followed). ``MemoryInputError``, in one line, for a
    symbolic link (a dangling one too: its target is never created), a name ending in
    ``-wal``, ``-shm`` or ``-journal`` (SQLite would take the file for another database's
    side file: a ``-wal`` is replayed into, or dropped by, the database it seems to belong
    to), or a name whose own side files already exist (the copy would open with them)."""
    target = target.expanduser()
    if target.name.endswith(SIDE_SUFFIXES):
        raise MemoryInputError(
            f"{target} ends in {target.name[target.name.rfind('-') :]}, a name SQLite keeps for"
            " a database's side files: give a name without -wal, -shm or -journal"
        )
    if target.is_symlink():
        raise MemoryInputError(f"{target} is a symbolic link: give the path of a new file")
    folder = target.parent.resolve()
    target = folder / target.name
    for suffix in SIDE_SUFFIXES:
        side = Path(f"{target}{suffix}")
        if side.exists() or side.is_symlink():
            raise MemoryInputError(f"{side} exists: give the path of a new file")
    return target


async def backup_file(source: Path, target: Path) -> int:
    """Write a consistent copy of the existing store ``source`` to the new file ``target``
    (mode 0600) with SQLite's online backup API, then check it (``PRAGMA
    integrity_check``). Returns the copy's page count. ``MemoryInputError`` when ``target``
    is the store itself, exists, is refused by :func:`new_file` or cannot be created; a copy
    that fails its check is removed."""
    source, target = await asyncio.to_thread(lambda: (source.resolve(), new_file(target)))
    if source == target:
        raise MemoryInputError(f"{target} is the database itself: give another path")
    try:
        # Created here, exclusively and private: an existing file is never overwritten, and a
        # symbolic link put there meanwhile is not followed (O_EXCL refuses it, O_NOFOLLOW too).
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        os.close(os.open(target, flags, 0o600))
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
