"""The SQLite connection every SQLite store part shares: one aiosqlite connection, WAL,
numbered migrations, and serialised write transactions.

Durability: ``journal_mode=WAL``. With ``synchronous=FULL`` (the default,
``SELFMIND_SQLITE_SYNCHRONOUS``) a write confirmed to the caller has been synced and survives
SIGKILL, an OS crash and power loss. ``normal`` skips the fsync at each commit: still durable
across the process crashing or being killed, but a power loss can roll back the last commits
(never corrupting the file; https://www.sqlite.org/pragma.html#pragma_synchronous).

Grouped commits (:meth:`SQLiteBase._write`): writes are serialised in this process; each runs
in its own SAVEPOINT inside a shared ``BEGIN IMMEDIATE`` transaction, and when other writers
already wait, the transaction stays open for them and is committed once after them (at most
``GROUP_MAX_OPS`` operations), so a burst of writes costs one fsync, not one each. A caller
leaves ``_write`` only after the COMMIT that holds its write, so what it confirms is on disk;
when that COMMIT fails, every caller in the group gets the error. A failed operation is rolled
back to its savepoint alone. Reads outside a write use a second connection (WAL readers do
not wait for the writer), so they never queue behind other users' writes on one thread; a
``:memory:`` store has one connection for both.
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
import contextlib
import contextvars
import logging
import os
import sqlite3
import stat
from collections import deque
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
GROUP_MAX_OPS = 32
"""Most write operations one grouped commit holds: bounds how long the first one waits."""

_IN_WRITE: contextvars.ContextVar[bool] = contextvars.ContextVar("in_sqlite_write", default=False)
"""True inside :meth:`SQLiteBase._write`: reads there see the transaction's own writes."""


def ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


class SQLiteBase:
    """Connection, migrations and transaction helpers. Open with :meth:`open`."""

    def __init__(self, conn: aiosqlite.Connection, path: str) -> None:
        self._conn = conn
        self._reader: aiosqlite.Connection | None = None
        self.path = path
        self._write_lock = WriteLock()
        self._group: asyncio.Future[None] | None = None  # COMMIT of the open transaction
        self._group_ops = 0
        self._group_urgent = False  # an urgent write waits for this group's COMMIT
        self._flushers: set[asyncio.Task[None]] = set()
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
            if path != ":memory:":
                store._reader = await aiosqlite.connect(path, isolation_level=None, timeout=30.0)
                await store._reader.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                await store._reader.execute("PRAGMA query_only=ON")
        except sqlite3.Error as exc:
            await store._close_connections()
            raise StoreError(f"cannot use database {path}: {exc}") from exc
        except BaseException:
            await store._close_connections()
            raise
        return store

    async def _close_connections(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        await self._conn.close()

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
                await self._commit_open_group()
                await self._conn.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            # Nothing is lost: the WAL is checkpointed at the next open.
            logger.info("WAL checkpoint at close skipped: %s", exc)
        finally:
            await self._close_connections()

    async def applied_migrations(self) -> list[str]:
        """Names of applied migrations, in order."""
        async with self._conn.execute("SELECT name FROM schema_migrations ORDER BY number") as cur:
            return [row[0] for row in await cur.fetchall()]

    # ---------------------------------------------------------------- helpers
    @asynccontextmanager
    async def _write(self, *, urgent: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """One write operation: its own SAVEPOINT in the shared ``BEGIN IMMEDIATE``
        transaction, serialised within this process; returns once the COMMIT holding it is
        done (grouped commits, module docstring). An exception in the body rolls back this
        operation only and is raised; a failed COMMIT raises its ``sqlite3.Error`` here.

        ``urgent`` (the writes before a platform acknowledgement) goes ahead of every other
        waiting writer, and its group is committed as soon as no urgent writer waits."""
        try:
            await self._write_lock.acquire(urgent=urgent)
        except BaseException:
            # Cancelled while waiting: the holder may have left the group open for us.
            self._schedule_flush()
            raise
        token = _IN_WRITE.set(True)
        try:
            if self._group is None:
                await self._conn.execute("BEGIN IMMEDIATE")
                self._group = asyncio.get_running_loop().create_future()
                self._group_ops, self._group_urgent = 0, False
            group = self._group
            await self._conn.execute("SAVEPOINT op")
            try:
                yield self._conn
            except BaseException:
                await self._undo_op()
                raise
            await self._conn.execute("RELEASE op")
            self._group_ops += 1
            self._group_urgent = self._group_urgent or urgent
        finally:
            try:
                if self._group is not None:
                    lock = self._write_lock
                    if (
                        not lock.waiting
                        or self._group_ops >= GROUP_MAX_OPS
                        or (self._group_urgent and not lock.urgent_waiting)
                    ):
                        await self._commit_open_group()
                    else:
                        self._schedule_flush()
            finally:
                _IN_WRITE.reset(token)
                self._write_lock.release()
        await asyncio.shield(group)

    async def _undo_op(self) -> None:
        """Roll back the failed operation's savepoint; when SQLite already rolled back the
        whole transaction (disk full, I/O error), the group's earlier operations fail too."""
        if self._conn.in_transaction:
            try:
                await self._conn.execute("ROLLBACK TO op")
                await self._conn.execute("RELEASE op")
                return
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    await self._conn.execute("ROLLBACK")
                self._fail_group(exc)
                return
        self._fail_group(StoreError("the write transaction was rolled back by SQLite"))

    def _fail_group(self, exc: BaseException) -> None:
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_exception(exc)
            group.exception()  # retrieved: its callers raise it, nothing to log at exit

    async def _commit_open_group(self) -> None:
        """COMMIT the open transaction, if any (caller holds the write lock)."""
        group = self._group
        if group is None:
            return
        try:
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                if self._conn.in_transaction:
                    await self._conn.execute("ROLLBACK")
            self._fail_group(exc)
            if not isinstance(exc, sqlite3.Error):
                raise
            return
        self._group = None
        if not group.done():
            group.set_result(None)

    def _schedule_flush(self) -> None:
        """Commit the open group after the writers queued now, should none of them do it."""
        if self._group is None or any(not t.done() for t in self._flushers):
            return

        async def flush() -> None:
            async with self._write_lock:
                await self._commit_open_group()

        task = asyncio.get_running_loop().create_task(flush())
        self._flushers.add(task)
        task.add_done_callback(self._flushers.discard)

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
            await self._commit_open_group()
            await self._conn.execute(f"PRAGMA busy_timeout={TRUNCATE_WAIT_MS}")
            try:
                rows = list(await self._conn.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)"))
            except sqlite3.Error as exc:
                logger.info("WAL truncate skipped: %s", exc)
                return False
            finally:
                await self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        done = bool(rows) and rows[0][0] == 0
        if not done:
            logger.info("WAL truncate incomplete: another process reads the database")
        return done

    def _read_conn(self) -> aiosqlite.Connection:
        """The writer's connection inside a write (to see its own rows), else the reader's."""
        if self._reader is None or _IN_WRITE.get():
            return self._conn
        return self._reader

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        # One hop to aiosqlite's thread (execute + fetch + close in one call).
        return list(await self._read_conn().execute_fetchall(sql, params))

    async def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        rows = await self._read_conn().execute_fetchall(sql, params)
        return next(iter(rows), None)


class WriteLock:
    """An asyncio lock with two queues: ``urgent`` waiters are granted it before the others,
    each queue in arrival order. Used as ``async with lock`` (not urgent) or
    ``await lock.acquire(urgent=...)`` / ``lock.release()``."""

    def __init__(self) -> None:
        self._locked = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._urgent) + len(self._normal)

    @property
    def urgent_waiting(self) -> int:
        return len(self._urgent)

    async def acquire(self, *, urgent: bool = False) -> None:
        if not self._locked and not self.waiting:
            self._locked = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._normal
        queue.append(fut)
        try:
            await fut
        except BaseException:
            if fut in queue:
                queue.remove(fut)
            elif fut.done() and not fut.cancelled():
                self.release()  # granted as we were cancelled: pass it on
            raise

    def release(self) -> None:
        for queue in (self._urgent, self._normal):
            while queue:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_result(None)  # ownership passes; still locked
                    return
        self._locked = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


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
