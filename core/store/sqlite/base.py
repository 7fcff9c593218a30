"""The SQLite connection every SQLite store part shares: one aiosqlite connection, WAL,
numbered migrations, and serialised write transactions.

Durability: ``journal_mode=WAL``. With ``synchronous=FULL`` (the default,
``SELFMIND_SQLITE_SYNCHRONOUS``) a write confirmed to the caller has been synced and survives
SIGKILL, an OS crash and power loss. ``normal`` skips the fsync at each commit: still durable
across the process crashing or being killed, but a power loss can roll back the last commits
(never corrupting the file; https://www.sqlite.org/pragma.html#pragma_synchronous). With 200
simultaneous users the two measured the same here (``bench/replay_locomo.py --concurrent``).
``secure_delete`` is on, so erased text is overwritten in the file, not just unlinked.

Private files: a store folder the bot creates is made 0700 and a new database file 0600,
whatever the umask; SQLite gives ``-wal``, ``-shm`` and ``-journal`` the main file's mode
(its unix VFS copies it), and they are set to 0600 after open as well. An existing store that
other accounts can read gets one warning at open, naming the ``chmod`` that fixes it.

Erasure (:meth:`SQLiteBase._erase_index`, :meth:`SQLiteBase._truncate_wal`): FTS5 in SQLite
3.40 deletes a row by writing a delete marker, and the row's terms stay in the segment that
holds them until that segment is rewritten. After a forget the user's FTS5 index (one of
``FTS_SHARDS``, :mod:`core.store.sqlite.migrations` m006) is rewritten by ``optimize``, which drops
the deleted rows' postings; the freed pages are zeroed (``secure_delete``). Then the WAL, which
still holds the old page images, is checkpointed into the main file and truncated to 0 bytes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import aiosqlite

from core.errors import MigrationError, StoreError
from core.store.sqlite.migrations import MIGRATIONS, fts_table
from core.types import utcnow

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
"""How long a statement waits for another process's write lock before ``database is locked``."""
TRUNCATE_WAIT_MS = 500
"""How long the WAL truncation after an erase waits for other processes' readers."""


def ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


class SQLiteBase:
    """Connection, migrations and transaction helpers. Open with :meth:`open`."""

    def __init__(self, conn: aiosqlite.Connection, path: str) -> None:
        self._conn = conn
        self.path = path
        self._write_lock = asyncio.Lock()
        self._uids: dict[str, int] = {}
        self._closed = False

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    async def open(cls, path: str, *, synchronous: str = "full") -> Self:
        """Open or create the file at ``path`` and apply pending migrations.

        Raises ``StoreError`` when the file cannot be opened, ``MigrationError`` when a
        migration fails (that migration is rolled back).
        """
        created = False
        if path != ":memory:":
            created = await asyncio.to_thread(_make_parent, path)
        try:
            conn = await aiosqlite.connect(path, isolation_level=None, timeout=30.0)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from exc
        store = cls(conn, path)
        try:
            await store._configure(synchronous)
            if path != ":memory:":
                await asyncio.to_thread(_private_files, path, created)
            await store._migrate()
        except sqlite3.Error as exc:
            await conn.close()
            raise StoreError(f"cannot use database {path}: {exc}") from exc
        except BaseException:
            await conn.close()
            raise
        return store

    async def _configure(self, synchronous: str) -> None:
        if synchronous.lower() not in ("normal", "full"):
            raise StoreError(f"synchronous must be normal or full, not {synchronous!r}")
        for pragma in (
            "PRAGMA journal_mode=WAL",
            f"PRAGMA synchronous={synchronous.upper()}",
            f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
            "PRAGMA foreign_keys=ON",
            "PRAGMA secure_delete=ON",
        ):
            await self._conn.execute(pragma)

    async def _migrate(self) -> None:
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        async with self._conn.execute("SELECT number FROM schema_migrations") as cur:
            applied = {row[0] for row in await cur.fetchall()}
        for number, name, sql in MIGRATIONS:
            if number in applied:
                continue
            logger.info("applying migration %s", name)
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                if callable(sql):
                    await sql(self._conn)
                else:
                    for statement in _split_sql(sql):
                        await self._conn.execute(statement)
                await self._conn.execute(
                    "INSERT INTO schema_migrations(number, name, applied_at) VALUES (?, ?, ?)",
                    (number, name, ts(utcnow())),
                )
                await self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                await self._conn.execute("ROLLBACK")
                raise MigrationError(f"migration {name} failed: {exc}") from exc

    async def close(self) -> None:
        """Checkpoint the WAL (best effort) and close the connection; a second call does
        nothing. Writes in flight in this process finish or roll back first."""
        if self._closed:
            return
        self._closed = True
        try:
            async with self._write_lock:
                await self._conn.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            # Nothing is lost: the WAL is checkpointed at the next open.
            logger.info("WAL checkpoint at close skipped: %s", exc)
        finally:
            await self._conn.close()

    async def applied_migrations(self) -> list[str]:
        """Names of applied migrations, in order."""
        async with self._conn.execute("SELECT name FROM schema_migrations ORDER BY number") as cur:
            return [row[0] for row in await cur.fetchall()]

    # ---------------------------------------------------------------- helpers
    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``), serialised within this process."""
        async with self._write_lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                await self._conn.execute("ROLLBACK")
                raise
            else:
                await self._conn.execute("COMMIT")

    async def _erase_index(self, uid: int) -> None:
        """Rewrite user ``uid``'s FTS5 index into one segment (inside the caller's write), so
        the postings of rows deleted from it leave the file. Costs about 1.2 us per memory in
        that index (1/32 of the store; ``bench/forget.py``)."""
        fts = fts_table(uid)
        await self._conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")

    async def _truncate_wal(self) -> bool:
        """Copy the WAL into the main file and truncate it to 0 bytes, so erased text leaves
        ``-wal`` too (the ``-shm`` index holds page numbers only). Waits at most
        ``TRUNCATE_WAIT_MS`` for readers in other processes; returns False (and the next
        erase or purge retries) when one still reads an older snapshot."""
        async with self._write_lock:
            await self._conn.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
            try:
                rows = await self._fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                logger.info("WAL truncate skipped: %s", exc)
                return False
            finally:
                await self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        done = bool(rows) and rows[0][0] == 0
        if not done:
            logger.info("WAL truncate incomplete: another process reads the database")
        return done

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        # One hop to aiosqlite's thread (execute + fetch + close in one call).
        return list(await self._conn.execute_fetchall(sql, params))

    async def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        rows = await self._conn.execute_fetchall(sql, params)
        return next(iter(rows), None)


DB_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")
"""The files of one SQLite store: the database, its WAL, its shared-memory index, and the
rollback journal (https://www.sqlite.org/tempfiles.html)."""


def _make_parent(path: str) -> bool:
    """Create the store's folder (0700) and an empty database file (0600) when missing,
    whatever the umask; True when the file is new. Raises ``StoreError``."""
    db = Path(path).expanduser()
    try:
        if not db.parent.exists():
            db.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(db.parent, 0o700)
        # O_EXCL: an existing file (another process's store) is left as it is. An empty
        # file is a valid empty SQLite database.
        fd = os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot create database {path}: {exc}") from exc
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


def _private_files(path: str, created: bool) -> None:
    """0600 for a new store's side files; one warning for an existing store that group or
    others can read or write."""
    db = str(Path(path).expanduser())
    shared: list[tuple[str, int]] = []
    for name in (db + suffix for suffix in DB_FILE_SUFFIXES):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except FileNotFoundError:
            continue
        if created:
            os.chmod(name, 0o600)
        elif mode & 0o077:
            shared.append((name, mode))
    if shared:
        logger.warning(
            "database files readable or writable by other accounts (mode %o): %s;"
            " fix: chmod 600 %s",
            shared[0][1],
            shared[0][0],
            " ".join(name for name, _ in shared),
        )


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (``;`` at line end; triggers end with ``END;``)."""
    statements, buf = [], []
    for line in script.splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            statements.append(joined)
            buf = []
    rest = "\n".join(buf).strip()
    if rest:
        statements.append(rest)
    return statements
