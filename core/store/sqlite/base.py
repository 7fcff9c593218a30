"""The SQLite connection every SQLite store part shares: one aiosqlite connection, WAL,
numbered migrations, and serialised write transactions.

Durability: ``journal_mode=WAL``. With ``synchronous=FULL`` (the default,
``SELFMIND_SQLITE_SYNCHRONOUS``) a write confirmed to the caller has been synced and survives
SIGKILL, an OS crash and power loss. ``normal`` skips the fsync at each commit: still durable
across the process crashing or being killed, but a power loss can roll back the last commits
(never corrupting the file; https://www.sqlite.org/pragma.html#pragma_synchronous).

Writes (:meth:`SQLiteBase._run`): each write operation is a plain function of the
``sqlite3`` connection, and a whole transaction runs as ONE call on the connection's thread
(aiosqlite's), so SQLite's write lock is never held while the event loop runs other users'
work. Operations are queued; one writer task takes what is queued (the writes before a
platform acknowledgement, ``urgent``, first; at most ``GROUP_MAX_OPS``) and runs them in one
``BEGIN IMMEDIATE`` ... ``COMMIT``, each in its own SAVEPOINT (grouped commits: a burst of
writes costs one fsync, not one each). A caller is answered only after the COMMIT that holds
its write, so what it confirms is on disk; when that COMMIT fails, or SQLite rolls the whole
transaction back (disk full, I/O error), every operation of the group gets the error. A failed
operation is rolled back to its savepoint alone. A few rare writes whose logic is shared with
PostgreSQL as async code (memory writes, cleanup changes, erasure) use :meth:`SQLiteBase._write`:
their own transaction over several hops, serialised with the writer by one lock.
Reads outside a write use a second connection (WAL readers do not wait for the writer), so
they never queue behind other users' writes on one thread; a ``:memory:`` store has one
connection for both. The few small indexed reads of every turn (a memory by id, a user's
last memory event, their memory count, a page of at most :data:`NOW_ROWS` memories:
:meth:`SQLiteBase._fetchall_now`) run on the calling thread, the event loop's, through a third
connection: each costs 10-70 us there, against 0.1 ms or more for the hop to the reader's
thread and back, and every hop is one more wait for a thread to be scheduled on a loaded
machine (``bench/use.py``, the latency of profile plus recall). That connection never waits:
for a lock (``busy_timeout`` 0) nor past :data:`NOW_STEPS` of SQLite's virtual machine (about
0.4 ms: the one-copy count of a user with thousands of memories learned outside their DM may
take longer); such a read is stopped and run again on the reader's thread, so the event loop
is never held up longer than that.
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
A connection reading an older snapshot (another process: the CLI, a backup, a ``sqlite3``
shell left in a transaction) blocks that truncation, and may still read the text itself.
So a truncation that finds one is tried again every :data:`WAL_RETRY_S` (5 s) until it
succeeds: a forgotten text leaves ``-wal`` (and the main file) at most about 5 s after the
last snapshot older than the forget ends, whatever else is written meanwhile.
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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Self, TypeVar, cast

import aiosqlite

from core.errors import MigrationError, StoreError
from core.store.effects import Notes, Notify
from core.store.migrations import effects_of, migrations_of
from core.store.schema import check_schema, first_version, state_of_rows
from core.store.sqlite.migrations import fts_table
from core.store.statements import Statement
from core.types import NewMemory, utcnow

logger = logging.getLogger(__name__)

MIGRATIONS = migrations_of("sqlite")
"""SQLite's migrations in order (:data:`core.store.migrations.STEPS`)."""
EFFECTS = effects_of("sqlite")

BUSY_TIMEOUT_MS = 30_000
"""How long a statement waits for another process's write lock before ``database is locked``."""
TRUNCATE_WAIT_MS = 500
"""How long the WAL truncation after an erase waits for other processes' readers."""
WAL_RETRY_S = 5.0
"""After an erase whose WAL truncation was blocked by a reader, how often it is tried again
(until it succeeds or the store closes): the bound on how long a forgotten text outlives the
last older snapshot in ``-wal``."""
WAL_RETRY_WAIT_MS = 100
"""How long each retry waits for readers (short: it holds this process's write lock)."""
WAL_BLOCKED_WARN_S = 60.0
"""After this long blocked, one WARNING says a reader is keeping forgotten text in the files
(SQLite cannot remove it while an older snapshot is read; the operator can end that reader)."""
NOW_ROWS = 200
"""Most rows a read run on the event loop's thread may ask for (:meth:`SQLiteBase._fetchall_now`;
the profile's 200 candidates): a longer read goes to the reader's thread, where it does not
hold up the event loop."""
NOW_STEPS = 10_000
"""Most SQLite virtual machine instructions a read on the event loop's thread may take (about
25 a microsecond here: 0.4 ms) before it is stopped and sent to the reader's thread
(:meth:`SQLiteBase._fetchall_now`). The profile's 200 rows of one user take about 8,000."""
_NOW_CHECK = 1_000
"""How often (in instructions) such a read checks :data:`NOW_STEPS`."""
GROUP_MAX_OPS = 64
"""Most write operations one grouped commit holds (about 0.1 ms each on the database thread):
bounds how long the first one waits."""

_IN_WRITE: contextvars.ContextVar[bool] = contextvars.ContextVar("in_sqlite_write", default=False)
"""True inside :meth:`SQLiteBase._write`: reads there see the transaction's own writes."""


def describe_error(exc: sqlite3.Error) -> str:
    """The error's type, SQLite result code and message, for logs and ``StoreError``
    (``OperationalError [SQLITE_FULL]: database or disk is full``)."""
    code = getattr(exc, "sqlite_errorname", None)
    return f"{type(exc).__name__}{f' [{code}]' if code else ''}: {exc}"


def store_error(exc: sqlite3.Error) -> StoreError:
    """A driver error (``sqlite3.Error``: the database locked past the busy timeout, the disk
    full, a constraint, an I/O error) as the ``StoreError`` the seams promise, as the
    PostgreSQL side raises its own (:meth:`core.store.postgres.base.PostgresBase._errors`);
    raise it ``from`` the driver's error. A plain ``try`` where it is used, not a context
    manager: free on the hot path."""
    return StoreError(f"database error: {describe_error(exc)}")


def ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def dt(value: str) -> datetime:
    return datetime.fromisoformat(value)


def day(value: str | None) -> date | None:
    """A stored ISO day (``YYYY-MM-DD``), None as None."""
    return None if value is None else date.fromisoformat(value)


def day_columns(memory: NewMemory) -> tuple[str | None, str | None, str | None]:
    """``about``, ``valid_from``, ``valid_until`` of ``memory`` as SQLite stores them."""
    first, last = memory.valid_from, memory.valid_until
    return (
        memory.about,
        None if first is None else first.isoformat(),
        None if last is None else last.isoformat(),
    )


class SQLiteBase:
    """Connection, migrations and transaction helpers. Open with :meth:`open`."""

    sweep_interval_s: float | None = None
    """One process owns the file: unfinished reflections are resumed at start-up only."""

    def __init__(self, conn: aiosqlite.Connection, path: str) -> None:
        self._conn = conn
        self._reader: aiosqlite.Connection | None = None
        self._now: sqlite3.Connection | None = None  # small reads on the caller's thread
        self._now_checks = 0  # what is left of the running one's NOW_STEPS, in checks
        self.path = path
        self._write_lock = WriteLock()
        self._queued: deque[_Op] = deque()  # write operations waiting for the writer
        self._queued_urgent: deque[_Op] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._uids: dict[str, int] = {}
        self._closed = False
        self._wal_retry: asyncio.Task[None] | None = None  # a blocked truncation, tried again
        self.wal_retry_s = WAL_RETRY_S
        self.wal_blocked_warn_s = WAL_BLOCKED_WARN_S
        self.migrated: tuple[str, ...] = ()
        """Names of the migrations this open applied, in order."""
        self.recall_records_dropped = 0
        """Recall records that failed (:class:`core.store.seams.RecallLog`)."""

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    async def open(
        cls,
        path: str,
        *,
        synchronous: str = "full",
        migrate: bool = True,
        notify: Notify | None = None,
    ) -> Self:
        """Open or create the file at ``path``; a new file gets the whole schema, and pending
        migrations are applied when ``migrate`` (their names are :attr:`migrated`); what a
        migration changes in stored memories is said before and after it runs, to ``notify``
        (or the log: :class:`core.store.effects.Notes`).

        Raises ``StoreError`` when the file cannot be opened, ``MigrationError`` when a
        migration fails (that migration is rolled back), ``NewerSchemaError`` for a file a
        newer SelfMind wrote and, without ``migrate``, ``SchemaBehindError`` for a file that
        needs migrations (:mod:`core.store.schema`; nothing is changed then).
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
            await store._migrate(apply=migrate, notes=Notes(EFFECTS, notify))
            if path != ":memory:":
                store._reader = await aiosqlite.connect(path, isolation_level=None, timeout=30.0)
                await store._reader.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                await store._reader.execute("PRAGMA query_only=ON")
                store._now = _now_connection(path)
                store._now.set_progress_handler(store._now_over, _NOW_CHECK)
        except sqlite3.Error as exc:
            await store._close_connections()
            raise StoreError(f"cannot use database {path}: {exc}") from exc
        except BaseException:
            await store._close_connections()
            raise
        return store

    async def _close_connections(self) -> None:
        if self._now is not None:
            self._now.close()
            self._now = None
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

    async def _migrate(self, *, apply: bool, notes: Notes) -> None:
        rows = await self._applied()
        state = state_of_rows(rows, ((n, name) for n, name, _ in MIGRATIONS))
        check_schema(state, where=f"database {self.path}", apply=apply)
        if not state.pending:
            return
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (number INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL, applied_at TEXT NOT NULL, selfmind_version TEXT)"
        )
        async with self._conn.execute("SELECT * FROM schema_migrations LIMIT 0") as cur:
            if "selfmind_version" not in [d[0] for d in cur.description]:
                # a store from before versions were recorded (core.store.schema)
                await self._conn.execute(
                    "ALTER TABLE schema_migrations ADD COLUMN selfmind_version TEXT"
                )

        async def fetch(sql: str, args: Sequence[Any]) -> Sequence[Sequence[Any]]:
            return list(await self._conn.execute_fetchall(sql, args))

        pending = {number for number, _ in state.pending}
        done: list[str] = []
        for number, name, sql in MIGRATIONS:
            if number not in pending:
                continue
            logger.info("applying migration %s", name)
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                before = await notes.before(name, fetch)
                result: object = None
                if callable(sql):
                    result = await sql(self._conn)
                else:
                    for statement in _split_sql(sql):
                        await self._conn.execute(statement)
                line = await notes.after(name, fetch, before, result)
                await self._conn.execute(
                    "INSERT INTO schema_migrations(number, name, applied_at, selfmind_version)"
                    " VALUES (?, ?, ?, ?)",
                    (number, name, ts(utcnow()), first_version("sqlite", number)),
                )
                await self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                await self._conn.execute("ROLLBACK")
                self.migrated = tuple(done)
                raise MigrationError(f"migration {name} failed: {exc}") from exc
            done.append(name)
            notes.applied(line)
        self.migrated = tuple(done)

    async def _applied(self) -> list[dict[str, Any]]:
        """The store's ``schema_migrations`` rows as column -> value; none in a new file
        (read only: nothing created)."""
        return await schema_rows(self._conn)

    async def close(self) -> None:
        """Checkpoint the WAL (best effort) and close the connection; a second call does
        nothing. Writes in flight in this process finish or roll back first."""
        if self._closed:
            return
        self._closed = True
        try:
            while self._queued_urgent or self._queued or not self._writer_done():
                if self._writer_done():  # cancelled with writes queued: their callers wait
                    self._writer = asyncio.get_running_loop().create_task(
                        self._write_queued(), name="sqlite-writer"
                    )
                assert self._writer is not None
                await asyncio.shield(self._writer)
            if self._wal_retry is not None and not self._wal_retry.done():
                self._wal_retry.cancel()  # one last try below, waiting as long as an erase does
                await asyncio.wait({self._wal_retry})
                await self._checkpoint_truncate(TRUNCATE_WAIT_MS)
            else:
                async with self._write_lock:
                    await self._conn.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            # Nothing is lost: the WAL is checkpointed at the next open.
            logger.info("WAL checkpoint at close skipped: %s", exc)
        finally:
            await self._close_connections()

    def _writer_done(self) -> bool:
        return self._writer is None or self._writer.done()

    async def applied_migrations(self) -> list[str]:
        """Names of applied migrations, in order."""
        async with self._conn.execute("SELECT name FROM schema_migrations ORDER BY number") as cur:
            return [row[0] for row in await cur.fetchall()]

    # ---------------------------------------------------------------- writes
    async def _run(self, op: Callable[[sqlite3.Connection], T], *, urgent: bool = False) -> T:
        """Run the write operation ``op`` (a function of the ``sqlite3`` connection, called on
        its thread) in its own SAVEPOINT of the next grouped transaction; returns its value
        once the COMMIT holding it is done (module docstring). An exception raised by ``op``
        rolls back ``op`` alone and is raised here (a ``sqlite3.Error`` as ``StoreError``,
        :func:`store_error`); a failed COMMIT (or a transaction SQLite rolled back: the disk
        full, an I/O error) raises its ``StoreError`` in every operation of the group.

        ``urgent`` (the writes before a platform acknowledgement) goes ahead of every other
        queued operation. Raises ``StoreError`` once the store is closed."""
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        queued = _Op(op, loop.create_future())
        (self._queued_urgent if urgent else self._queued).append(queued)
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_queued(), name="sqlite-writer")
        # Cancelling the caller before its group starts drops the operation (the writer skips
        # a done future); once started, it commits with its group.
        try:
            return cast(T, await queued.future)
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    async def _write_queued(self) -> None:
        """The writer: run queued operations, a group at a time, until none is left."""
        while self._queued_urgent or self._queued:
            await self._write_lock.acquire(urgent=bool(self._queued_urgent))
            group: list[_Op] = []
            try:
                group = _take(self._queued_urgent, GROUP_MAX_OPS)
                group += _take(self._queued, GROUP_MAX_OPS - len(group))
                if group:
                    outcomes = await self._on_thread(_run_group, [op.fn for op in group])
                    for queued, (ok, value) in zip(group, outcomes, strict=True):
                        if queued.future.done():
                            continue
                        if ok:
                            queued.future.set_result(value)
                        else:
                            queued.future.set_exception(value)
            except BaseException as exc:  # the connection's thread failed: fail the group
                for queued in group:
                    if not queued.future.done():
                        queued.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            finally:
                self._write_lock.release()

    async def _run_statements(
        self, statements: Sequence[Statement], *, retry: bool = False
    ) -> list[int]:
        """:meth:`core.store.statements.StatementRules._run_statements`: one operation of
        the next grouped transaction (:meth:`_run`), each ``datetime`` parameter as its ISO
        text (:func:`ts`). ``retry`` is moot: one writer, no deadlock."""
        rows = [
            (sql, tuple(ts(p) if isinstance(p, datetime) else p for p in params))
            for sql, params in statements
        ]

        def run(conn: sqlite3.Connection) -> list[int]:
            return [conn.execute(sql, params).rowcount for sql, params in rows]

        return await self._run(run)

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(sqlite3_connection, *args)`` as one call on the connection's own thread.

        aiosqlite runs every call it makes this way (``Connection._execute``, its one queue to
        the thread); it has no public name for a call of ours, hence the private one."""
        return await _call_on(self._conn, fn, *args)

    @asynccontextmanager
    async def _write(self, *, urgent: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction whose body is async (shared logic, several statements over
        several hops to the connection's thread): ``BEGIN IMMEDIATE`` ... ``COMMIT``, alone,
        serialised with :meth:`_run`'s groups. Returns after its COMMIT; an exception in the
        body rolls it back and is raised (a ``sqlite3.Error`` as ``StoreError``,
        :func:`store_error`). Only for rare writes: it holds the write lock across
        event-loop hops."""
        if self._closed:
            raise StoreError("the store is closed")
        await self._write_lock.acquire(urgent=urgent)
        token = _IN_WRITE.set(True)
        try:
            try:
                try:
                    await self._conn.execute("BEGIN IMMEDIATE")
                except BaseException:
                    # Cancelled while queued, the BEGIN still runs on the thread: end it there
                    # (queued after it) before the lock passes on. After a failed BEGIN this
                    # ROLLBACK fails harmlessly.
                    with contextlib.suppress(sqlite3.Error):
                        await self._conn.execute("ROLLBACK")
                    raise
                try:
                    yield self._conn
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        if self._conn.in_transaction:
                            await self._conn.execute("ROLLBACK")
                    raise
                try:
                    await self._conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        if self._conn.in_transaction:
                            await self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise store_error(exc) from exc
        finally:
            _IN_WRITE.reset(token)
            self._write_lock.release()

    async def _uid(self, user_key: str, *, create: bool = False) -> int | None:
        """The numeric id of ``user_key``; created (inside a write) when ``create``."""
        if user_key in self._uids:
            return self._uids[user_key]
        row = await self._fetchone("SELECT uid FROM users WHERE user_key = ?", (user_key,))
        if row is None:
            if not create:
                return None
            cur = await self._conn.execute(
                "INSERT INTO users(user_key, created_at) VALUES (?, ?)", (user_key, ts(utcnow()))
            )
            uid = cast(int, cur.lastrowid)
        else:
            uid = row[0]
        if not _IN_WRITE.get():
            # Only a committed uid is kept: one inserted (or read) inside a write that then
            # rolls back would be handed by SQLite to the next new user.
            self._uids[user_key] = uid
        return uid

    async def _erase_index(self, uid: int) -> None:
        """Rewrite user ``uid``'s FTS5 index into one segment (inside the caller's write), so
        the postings of rows deleted from it leave the file. Costs about 1.2 us per memory in
        that index (1/32 of the store; ``bench/forget.py``)."""
        fts = fts_table(uid)
        await self._conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")

    async def _truncate_wal(self) -> bool:
        """Copy the WAL into the main file and truncate it to 0 bytes, so erased text leaves
        ``-wal`` too (the ``-shm`` index holds page numbers only). Waits at most
        ``TRUNCATE_WAIT_MS`` for readers in other processes; when one still reads an older
        snapshot, returns False and tries again every :data:`WAL_RETRY_S` in the background
        until it succeeds (module docstring)."""
        done = await self._checkpoint_truncate(TRUNCATE_WAIT_MS)
        if not done:
            logger.info(
                "WAL truncate incomplete: another connection reads the database; retrying"
                " every %s s",
                self.wal_retry_s,
            )
            if not self._closed and (self._wal_retry is None or self._wal_retry.done()):
                self._wal_retry = asyncio.get_running_loop().create_task(
                    self._truncate_until_done(), name="sqlite-wal-truncate"
                )
        return done

    async def _truncate_until_done(self) -> None:
        """The background retry of a blocked truncation (:meth:`_truncate_wal`)."""
        tries = 0
        started = asyncio.get_running_loop().time()
        warned = False
        while not self._closed:
            await asyncio.sleep(self.wal_retry_s)
            tries += 1
            if not self._closed and await self._checkpoint_truncate(WAL_RETRY_WAIT_MS):
                logger.info("WAL truncated after an erase, at retry %d", tries)
                return
            waited = asyncio.get_running_loop().time() - started
            if not warned and waited >= self.wal_blocked_warn_s:
                warned = True
                logger.warning(
                    "forgotten text is still in %s and its -wal after %.0f s: another"
                    " connection (a sqlite3 shell, a CLI command or a backup) holds a read"
                    " transaction that began before the forget; it is erased within %s s"
                    " of that transaction ending",
                    self.path,
                    waited,
                    self.wal_retry_s,
                )

    async def _checkpoint_truncate(self, wait_ms: int) -> bool:
        """One ``wal_checkpoint(TRUNCATE)``, waiting at most ``wait_ms`` for readers; True
        when the WAL was copied and truncated to 0 bytes."""
        async with self._write_lock:
            await self._conn.execute(f"PRAGMA busy_timeout={wait_ms}")
            try:
                rows = list(await self._conn.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)"))
            except sqlite3.Error as exc:
                logger.info("WAL truncate skipped: %s", exc)
                return False
            finally:
                await self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return bool(rows) and rows[0][0] == 0

    def _read_conn(self) -> aiosqlite.Connection:
        """The writer's connection inside a write (to see its own rows), else the reader's."""
        if self._reader is None or _IN_WRITE.get():
            return self._conn
        return self._reader

    async def _read_on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(sqlite3_connection, *args)`` as one call on the thread of
        :meth:`_read_conn`'s connection: several statements for one hop (see
        :meth:`_on_thread`). ``fn`` only reads, in autocommit (each statement its own
        snapshot, as with :meth:`_fetchall`)."""
        try:
            return await _call_on(self._read_conn(), fn, *args)
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    async def _fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        # One hop to aiosqlite's thread (execute + fetch + close in one call).
        try:
            return list(await self._read_conn().execute_fetchall(sql, params))
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    async def _fetchone(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        try:
            rows = await self._read_conn().execute_fetchall(sql, params)
        except sqlite3.Error as exc:
            raise store_error(exc) from exc
        return next(iter(rows), None)

    async def _fetchall_now(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """:meth:`_fetchall` for a small read by index (at most :data:`NOW_ROWS` rows), run
        here on the calling thread with no hop (module docstring). Inside a write, in a
        ``:memory:`` store, when another connection holds a lock this read would wait for
        (SQLite's ``SQLITE_BUSY``) or when it takes more than :data:`NOW_STEPS` (stopped:
        ``SQLITE_INTERRUPT``), it is :meth:`_fetchall`, on the reader's thread."""
        conn = self._now
        if conn is None or _IN_WRITE.get():
            return await self._fetchall(sql, params)
        self._now_checks = NOW_STEPS // _NOW_CHECK
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in _NOT_NOW:
                return await self._fetchall(sql, params)
            raise store_error(exc) from exc
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    def _now_over(self) -> bool:
        """The progress handler of the event loop thread's reads: True (stop) past
        :data:`NOW_STEPS`."""
        self._now_checks -= 1
        return self._now_checks < 0

    async def _fetchone_now(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        """:meth:`_fetchone` run as :meth:`_fetchall_now`."""
        return next(iter(await self._fetchall_now(sql, params)), None)


T = TypeVar("T")


async def _call_on(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """``fn(sqlite3_connection, *args)`` queued on ``conn``'s own thread, as aiosqlite queues
    its own calls (``Connection._execute``: no public name for a call of ours)."""
    execute = cast(Callable[..., Awaitable[T]], conn._execute)
    return await execute(fn, conn._conn, *args)


@dataclass(frozen=True, slots=True)
class _Op:
    """One queued write operation and the future its caller awaits."""

    fn: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]


def _take(queue: deque[_Op], most: int) -> list[_Op]:
    """Up to ``most`` operations from ``queue`` whose callers still wait."""
    taken: list[_Op] = []
    while queue and len(taken) < most:
        queued = queue.popleft()
        if not queued.future.done():
            taken.append(queued)
    return taken


def _run_group(
    conn: sqlite3.Connection, ops: Sequence[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, Any]]:
    """On the connection's thread: ``ops`` in one transaction, each in a SAVEPOINT; returns
    ``(True, value)`` or ``(False, exception)`` per operation. The whole group fails with the
    error when the COMMIT fails or SQLite rolled the transaction back under an operation."""
    outcomes: list[tuple[bool, Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
        for op in ops:
            conn.execute("SAVEPOINT op")
            try:
                value = op(conn)
            except Exception as exc:
                if not conn.in_transaction:  # disk full, I/O error: all of it is gone
                    raise
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                outcomes.append((False, exc))
                continue
            conn.execute("RELEASE op")
            outcomes.append((True, value))
        conn.execute("COMMIT")
    except Exception as exc:
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        return [(False, exc)] * len(ops)
    return outcomes


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


_NOT_NOW = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT)
"""SQLite's result codes of a read on the event loop's thread that is run again on the
reader's thread: a lock it would wait for, or stopped past :data:`NOW_STEPS`."""


def _now_connection(path: str) -> sqlite3.Connection:
    """The connection of the reads run on the event loop's thread
    (:meth:`SQLiteBase._fetchall_now`): read only, autocommit (no snapshot held between
    statements, so it never blocks the WAL's truncation after an erase), and never waiting
    for a lock (``busy_timeout`` 0). Usable from any thread: a store is used from its event
    loop's."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only=ON")
    except BaseException:
        conn.close()
        raise
    return conn


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


async def schema_rows(conn: aiosqlite.Connection) -> list[dict[str, Any]]:
    """The ``schema_migrations`` rows of the store on ``conn`` as column -> value (every
    column: ``selfmind_version`` where the store records it); none when it has no table."""
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    async with conn.execute(sql) as cur:
        if await cur.fetchone() is None:
            return []
    async with conn.execute("SELECT * FROM schema_migrations") as cur:
        columns = [d[0] for d in cur.description]
        return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]


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
