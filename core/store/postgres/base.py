"""The PostgreSQL connection every PostgreSQL store part shares: an asyncpg pool, numbered
migrations, replica identity, and the advisory locks that let several bot processes
(replicas) share one database.

Connections: a pool of ``pool_size`` connections for queries, a reserved pool of
``INTAKE_POOL_SIZE`` for the writes before a platform acknowledgement (the claim and the
user's message: they never queue behind other users' answers, reflections or imports for a
connection), plus one session connection per replica that holds its advisory locks. Both
need session-level state, so put a pooler (PgBouncer) in session mode, not transaction mode,
in front of the server.

Advisory locks (two-key form ``(namespace, key)``):

- ``(LOCK_MIGRATIONS, 0)``: held while migrations run, so replicas starting together apply
  each migration once;
- ``(LOCK_REPLICA, replica_id)``: held by each replica's session connection for its whole
  life. A replica is alive exactly while the lock is held: when the process dies, even by
  SIGKILL, the server drops the connection and the lock with it (TCP keepalives bound this
  to about a minute when the whole host vanishes), and the other replicas take over the
  reflections it left (``turns.claimed_by``; :mod:`core.store.postgres.conversations`);
- ``(LOCK_REFLECTION, hash(user_key))``: held around each reflection of a user
  (:meth:`core.store.postgres.conversations.PostgresConversations.reflection_lock`), so one
  user's reflections never interleave across replicas.

Durability: the server's own (``synchronous_commit`` on by default): a write confirmed to the
caller is committed. Errors: ``StoreError`` (``MigrationError`` for a failed migration); the
database password never appears in logs or errors (:func:`mask_url`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from core.errors import MigrationError, StoreError
from core.store.effects import Notes, Notify
from core.store.locks import KeyedLocks
from core.store.migrations import effects_of, migrations_of
from core.store.postgres.migrations import numbered
from core.store.schema import check_schema, first_version, state_of_rows
from core.store.statements import Statement
from core.store.writes import REFLECTING_SQL

logger = logging.getLogger(__name__)

MIGRATIONS = migrations_of("postgres")
"""PostgreSQL's migrations in order (:data:`core.store.migrations.STEPS`)."""
EFFECTS = effects_of("postgres")

LOCK_MIGRATIONS = 0x534D0001
"""Advisory lock namespace for migrations (first key of the two-key form)."""
LOCK_REPLICA = 0x534D0002
"""Advisory lock namespace for replica liveness; the second key is the replica id."""
LOCK_REFLECTION = 0x534D0003
"""Advisory lock namespace for per-user reflections; the second key hashes the user key."""
SWEEP_INTERVAL_S = 5.0
"""How often a replica looks for reflections that a dead replica left behind."""
DEFAULT_POOL_SIZE = 10
"""Pooled connections per replica (plus the intake's and one session connection for locks)."""
INTAKE_POOL_SIZE = 4
"""Connections per replica kept for the writes before an acknowledgement (one round trip
each for a new message)."""

DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
"""What asyncpg raises when the server refuses, fails or cannot be reached."""
DEADLOCK_RETRIES = 3
"""Runs of a transaction the server aborted to break a deadlock (:meth:`_tx_retrying`)."""
T = TypeVar("T")


_QUERY_PASSWORD = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)

KEEPALIVE = {
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}
"""Server-side TCP keepalives for every connection: a replica whose host vanished (power,
network) is seen as gone, and its locks released, within about a minute, not hours."""


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and error messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable database URL>"
    if parts.password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    query = _QUERY_PASSWORD.sub(r"\1***", parts.query)
    return urlunsplit(parts._replace(query=query))


def user_lock_key(user_key: str) -> int:
    """The second advisory-lock key of a user: 32 bits of BLAKE2b of the key, signed."""
    digest = hashlib.blake2b(user_key.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def describe_error(exc: BaseException) -> str:
    """The error's type, SQLSTATE and message, for logs and ``StoreError``: never its
    ``detail``, which can quote row values (memory text)."""
    state = getattr(exc, "sqlstate", None)
    # A server error's str() ends with its DETAIL ("Failing row contains (...)"): its
    # primary message alone.
    message = getattr(exc, "message", None) or str(exc)
    return f"{type(exc).__name__}{f' [{state}]' if state else ''}: {message}"


class PostgresBase:
    """Pool, session connection, migrations and locks. Open with :meth:`open`."""

    sweep_interval_s: float | None = SWEEP_INTERVAL_S
    """Several replicas share the database: a replica looks for reflections left behind by
    dead ones this often (seconds), besides at start-up."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        session: asyncpg.Connection,
        url: str,
        replica_id: int,
        intake: asyncpg.Pool | None = None,
    ) -> None:
        self._pool = pool
        self._intake = intake or pool
        self._session = session
        self._url = url
        self.replica_id = replica_id
        self._session_lock = asyncio.Lock()
        self._user_locks = KeyedLocks()
        self._uids: dict[str, int] = {}
        self._closed = False
        self.migrated: tuple[str, ...] = ()
        """Names of the migrations this open applied, in order."""
        self.recall_records_dropped = 0
        """Recall records that failed (:class:`core.store.seams.RecallLog`)."""

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    async def open(
        cls,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        sweep_interval_s: float | None = SWEEP_INTERVAL_S,
        migrate: bool = True,
        notify: Notify | None = None,
    ) -> Self:
        """Connect to ``url`` (``postgresql://``), create the schema of a new database or,
        when ``migrate``, apply pending migrations (:attr:`migrated`; what one changes in
        stored memories is said to ``notify`` or the log, :class:`core.store.effects.Notes`),
        join as a replica.

        Raises ``StoreError`` when the server cannot be reached or used, ``MigrationError``
        when a migration fails (that migration is rolled back), ``NewerSchemaError`` /
        ``SchemaBehindError`` as :func:`apply_migrations` does.
        """
        masked = mask_url(url)
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=max(1, pool_size),
                command_timeout=300,
                server_settings=KEEPALIVE,
                reset=_keep_as_is,
            )
        except DB_ERRORS as exc:
            raise StoreError(f"cannot open database {masked}: {describe_error(exc)}") from None
        session: asyncpg.Connection | None = None
        intake: asyncpg.Pool | None = None
        try:
            async with pool.acquire() as conn:
                migrated = await apply_migrations(conn, apply=migrate, where=masked, notify=notify)
            session = await asyncpg.connect(url, server_settings=KEEPALIVE)
            replica_id = await _join(session)
            intake = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=INTAKE_POOL_SIZE,
                command_timeout=300,
                server_settings=KEEPALIVE,
                reset=_keep_as_is,
            )
        except DB_ERRORS as exc:
            await _close_quietly(pool, session, intake)
            raise StoreError(f"cannot use database {masked}: {describe_error(exc)}") from None
        except BaseException:
            await _close_quietly(pool, session, intake)
            raise
        store = cls(pool, session, url, replica_id, intake)
        store.sweep_interval_s = sweep_interval_s
        store.migrated = tuple(migrated)
        logger.info("joined %s as replica %s", masked, replica_id)
        return store

    async def close(self) -> None:
        """Hand this replica's unfinished reflections back, release its locks, close the
        pool; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            async with self._pool.acquire() as conn:
                await conn.execute(
                    "UPDATE turns SET claimed_by = NULL WHERE claimed_by = $1"
                    f" AND reflection IN {REFLECTING_SQL}",
                    self.replica_id,
                )
            async with self._session_lock:
                await self._session.execute("SELECT pg_advisory_unlock_all()")
        except DB_ERRORS as exc:
            logger.warning("closing replica %s: %s", self.replica_id, type(exc).__name__)
        finally:
            await _close_quietly(
                self._pool, self._session, self._intake if self._intake is not self._pool else None
            )

    async def applied_migrations(self) -> list[str]:
        """Names of applied migrations, in order."""
        rows = await self._fetch("SELECT name FROM schema_migrations ORDER BY number")
        return [str(r[0]) for r in rows]

    # ---------------------------------------------------------------- locks
    async def _session_value(self, sql: str, *args: Any, quiet: bool = False) -> Any:
        """One value from the session connection, reconnecting (and rejoining under the
        same replica id) if the connection was lost."""
        async with self._session_lock:
            try:
                if self._session.is_closed():
                    await self._reconnect_session()
                return await self._session.fetchval(sql, *args)
            except DB_ERRORS as exc:
                if quiet:
                    logger.warning("session connection: %s", describe_error(exc))
                    return None
                raise StoreError(f"database error: {describe_error(exc)}") from None

    async def _reconnect_session(self) -> None:
        logger.warning(
            "replica %s lost its session connection; reconnecting (locks were released)",
            self.replica_id,
        )
        self._session = await asyncpg.connect(self._url, server_settings=KEEPALIVE)
        if not await self._session.fetchval(
            "SELECT pg_try_advisory_lock($1, $2)", LOCK_REPLICA, self.replica_id
        ):
            self.replica_id = await _join(self._session)

    async def check_session(self) -> None:
        """Reconnect the session connection if it was lost (the sweep calls this)."""
        await self._session_value("SELECT 1")

    # ---------------------------------------------------------------- helpers
    async def _uid(self, user_key: str) -> int | None:
        """The numeric id of ``user_key`` (cached; ids never change), or None."""
        if user_key in self._uids:
            return self._uids[user_key]
        uid = await self._fetchval("SELECT uid FROM users WHERE user_key = $1", user_key)
        if uid is not None:
            self._uids[user_key] = int(uid)
        return None if uid is None else int(uid)

    async def _lock_user(
        self, conn: asyncpg.Connection, user_key: str, *, create: bool = False
    ) -> int | None:
        """Lock the user's row for this transaction (created when ``create``): every write to
        a user's memories takes it first, so one user's writes are serialised across
        replicas (dedupe sees what the other replica just stored) and never deadlock."""
        sql = "SELECT uid FROM users WHERE user_key = $1 FOR UPDATE"
        uid = await conn.fetchval(sql, user_key)
        if uid is None and create:
            uid = await conn.fetchval(
                "INSERT INTO users(user_key, created_at) VALUES ($1, now())"
                " ON CONFLICT (user_key) DO NOTHING RETURNING uid",
                user_key,
            )
            if uid is None:  # another replica created it meanwhile
                uid = await conn.fetchval(sql, user_key)
        if uid is None:
            return None
        self._uids[user_key] = int(uid)
        return int(uid)

    async def _run_statements(
        self, statements: Sequence[Statement], *, retry: bool = False
    ) -> list[int]:
        """:meth:`core.store.statements.StatementRules._run_statements`: one transaction
        (:meth:`_tx`, or :meth:`_tx_retrying` with ``retry``), the placeholders numbered."""

        async def run(conn: asyncpg.Connection) -> list[int]:
            # A command tag ("UPDATE 3", "INSERT 0 1") ends with the rows it changed.
            return [
                int(str(await conn.execute(numbered(sql), *params)).split()[-1])
                for sql, params in statements
            ]

        if retry:
            return await self._tx_retrying(run)
        async with self._tx() as conn:
            return await run(conn)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except DB_ERRORS as exc:
            raise StoreError(f"database error: {describe_error(exc)}") from None

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[asyncpg.Connection]:
        """One transaction on a pooled connection; database errors become ``StoreError``."""
        with self._errors():
            async with self._pool.acquire() as conn, conn.transaction():
                yield conn

    async def _tx_retrying(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` in one transaction (:meth:`_tx`), run again when PostgreSQL aborts it to
        break a deadlock (SQLSTATE 40P01; the PostgreSQL manual, "Explicit Locking",
        Deadlocks: the other transactions go on, the aborted one may simply be retried), at
        most :data:`DEADLOCK_RETRIES` runs. For the user's commands whose locks cross the
        turn loop's (forget everything, a mode change): a turn finishing, a mode change and
        a forget of the same user can wait on each other in a cycle."""
        with self._errors():  # the last run's deadlock, like any error, a StoreError
            for run in range(1, DEADLOCK_RETRIES + 1):
                try:
                    async with self._pool.acquire() as conn, conn.transaction():
                        return await work(conn)
                except asyncpg.exceptions.DeadlockDetectedError:
                    if run == DEADLOCK_RETRIES:
                        raise
                    logger.warning("deadlock broken by the server: running again (run %d)", run)
                    await asyncio.sleep(0.01 * run)
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _intake_tx(self) -> AsyncIterator[asyncpg.Connection]:
        """One transaction on the intake's reserved pool (the writes before an
        acknowledgement); database errors become ``StoreError``."""
        with self._errors():
            async with self._intake.acquire() as conn, conn.transaction():
                yield conn

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        with self._errors():
            return list(await self._pool.fetch(sql, *args))

    async def _fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        with self._errors():
            return await self._pool.fetchrow(sql, *args)

    async def _fetchval(self, sql: str, *args: Any) -> Any:
        with self._errors():
            return await self._pool.fetchval(sql, *args)

    async def _execute(self, sql: str, *args: Any) -> str:
        with self._errors():
            return str(await self._pool.execute(sql, *args))


async def pg_schema_rows(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """The ``schema_migrations`` rows (every column: ``selfmind_version`` where the database
    records it); none when it has no table."""
    if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        return []
    return list(await conn.fetch("SELECT * FROM schema_migrations"))


async def apply_migrations(
    conn: asyncpg.Connection,
    *,
    apply: bool = True,
    where: str = "",
    notify: Notify | None = None,
) -> list[str]:
    """Check the schema on ``conn`` under the migrations advisory lock, then apply pending
    migrations (all of them in a new database; in one that is behind only when ``apply``),
    each recorded with the first SelfMind version that knows it, and what one changes in
    stored memories said before and after it (:class:`core.store.effects.Notes`).
    Returns the names applied now. Raises ``MigrationError`` (the failed migration is rolled
    back), ``NewerSchemaError`` / ``SchemaBehindError`` (:mod:`core.store.schema`; nothing
    is changed then). ``where`` names the database in those messages."""
    await conn.execute("SELECT pg_advisory_lock($1, 0)", LOCK_MIGRATIONS)
    try:
        state = state_of_rows(await pg_schema_rows(conn), ((n, nm) for n, nm, _ in MIGRATIONS))
        check_schema(state, where=f"database {where or 'PostgreSQL'}", apply=apply)
        if not state.pending:
            return []
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (number integer PRIMARY KEY,"
            " name text NOT NULL, applied_at timestamptz NOT NULL, selfmind_version text)"
        )
        # a database from before versions were recorded (core.store.schema)
        await conn.execute(
            "ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS selfmind_version text"
        )
        notes = Notes(EFFECTS, notify)

        async def fetch(sql: str, args: Sequence[Any]) -> Sequence[Sequence[Any]]:
            return list(await conn.fetch(numbered(sql), *args))

        pending = {number for number, _ in state.pending}
        done = []
        for number, name, sql in MIGRATIONS:
            if number not in pending:
                continue
            logger.info("applying migration %s", name)
            try:
                async with conn.transaction():
                    before = await notes.before(name, fetch)
                    result: object = None
                    if callable(sql):
                        result = await sql(conn)
                    else:
                        await conn.execute(sql)
                    line = await notes.after(name, fetch, before, result)
                    await conn.execute(
                        "INSERT INTO schema_migrations(number, name, applied_at, selfmind_version)"
                        " VALUES ($1, $2, now(), $3)",
                        number,
                        name,
                        first_version("postgres", number),
                    )
            except asyncpg.PostgresError as exc:
                raise MigrationError(f"migration {name} failed: {describe_error(exc)}") from None
            done.append(name)
            notes.applied(line)
        return done
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, 0)", LOCK_MIGRATIONS)


async def _keep_as_is(conn: asyncpg.Connection) -> None:
    """A pooled connection goes back to its pool without asyncpg's reset query (``RESET ALL``,
    ``UNLISTEN *``, ``pg_advisory_unlock_all()``...: a round trip and a server transaction at
    every use): the store leaves no session state on them (no ``SET``, ``LISTEN`` or cursor;
    the one advisory lock taken on one, the migrations', is released in a ``finally``; the
    locks that live long are on the session connection). asyncpg still rolls back a
    transaction left open."""


async def _join(session: asyncpg.Connection) -> int:
    """Take a fresh replica id and hold its liveness lock on ``session``."""
    while True:
        replica_id = int(await session.fetchval("SELECT nextval('replica_ids')"))
        if await session.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_REPLICA, replica_id):
            return replica_id


async def _close_quietly(
    pool: asyncpg.Pool, session: asyncpg.Connection | None, intake: asyncpg.Pool | None = None
) -> None:
    if session is not None and not session.is_closed():
        try:
            await session.close(timeout=5)
        except DB_ERRORS:
            session.terminate()
    for each in (pool, intake):
        if each is None:
            continue
        try:
            await asyncio.wait_for(each.close(), 10)
        except (TimeoutError, *DB_ERRORS):
            each.terminate()
