"""One place that maps a database URL to its backend: which backend a ``SELFMIND_DB`` value
names (:func:`database`), and, for either backend, opening its store, migrating it, backing
it up and reading its schema. The runtime, the settings, the CLI, ``doctor`` and the
terminal ask here; nothing else branches on a URL's scheme.

Accepted values (surrounding spaces ignored):

- a file path (``~/.selfmind/memory.db``, relative to the working folder) or
  ``sqlite:///PATH`` (``sqlite:////abs`` and ``sqlite:///rel`` alike): SQLite, the file made
  absolute;
- ``postgresql://...`` or ``postgres://...`` (libpq's URI form): PostgreSQL, kept as given.

Anything else is a :class:`~core.errors.ConfigError` in one line naming the setting: an
empty value, an unknown scheme, a URL that does not parse, control or invisible characters
(a value pasted with a newline, a bidirectional override). The line never holds a
password (:func:`mask_url`).

Importing this module imports no backend: each operation imports its backend's code when
it runs.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from core.errors import ConfigError, StoreError

if TYPE_CHECKING:
    import asyncpg

    from core.store.effects import Notify
    from core.store.schema import SchemaState
    from core.store.seams import Store

SCHEMES: dict[str, Literal["sqlite", "postgres"]] = {
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
}
"""URL scheme -> backend."""
USE = "use a file path, sqlite:///PATH or postgresql://USER@HOST/DB"
_SCHEME_TYPO = re.compile(r"(?i)^(sqlite|postgres|postgresql):")


@dataclass(frozen=True)
class Database:
    """A database named by a URL: its ``backend`` and its ``url`` (``sqlite:///ABSOLUTE``,
    or the PostgreSQL URL as given)."""

    backend: Literal["sqlite", "postgres"]
    url: str

    @property
    def sqlite(self) -> bool:
        return self.backend == "sqlite"

    @property
    def path(self) -> Path:
        """The SQLite file (absolute); ``ConfigError`` for a PostgreSQL database."""
        if not self.sqlite:
            raise ConfigError(f"{self.where} is not a SQLite file")
        return Path(self.url.removeprefix("sqlite:///"))

    @property
    def label(self) -> str:
        """``SQLite`` or ``PostgreSQL``."""
        return "SQLite" if self.sqlite else "PostgreSQL"

    @property
    def where(self) -> str:
        """What messages name it by: the file, or the URL without its password."""
        return str(self.path) if self.sqlite else mask_url(self.url)

    def local_folder(self) -> Path:
        """Where files that go with the store live on this machine (the terminal's input
        history): the SQLite file's folder, or ``~/.selfmind`` for PostgreSQL."""
        return self.path.parent if self.sqlite else Path.home() / ".selfmind"


def database(value: str, *, setting: str = "SELFMIND_DB") -> Database:
    """The database ``value`` names (see the module docstring for what is accepted).

    Raises ``ConfigError`` (its message starts with ``setting``) for an empty value, control
    characters, an unknown scheme or a URL that does not parse."""
    value = value.strip()
    if not value:
        raise ConfigError(f"{setting} is empty: {USE}")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in value):
        raise ConfigError(f"{setting} holds control characters: {USE}")
    if "://" not in value:
        lookalike = _SCHEME_TYPO.match(value)
        if lookalike:  # postgresql:/h/db would silently become a new SQLite file
            raise ConfigError(f"{setting}: {lookalike.group(1)}: needs '://': {USE}")
        return _sqlite(value)
    scheme, rest = value.split("://", 1)
    backend = SCHEMES.get(scheme.lower())
    if backend is None:
        shown = scheme if len(scheme) <= 20 else scheme[:20] + "..."
        raise ConfigError(f"{setting}: unsupported scheme {shown!r}: {USE}")
    if backend == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise ConfigError(f"{setting}: a SQLite URL is sqlite:///PATH (three slashes)")
        return _sqlite(rest.removeprefix("/"))
    try:
        parts = urlsplit(value)
        _ = parts.port  # a bad port raises here
    except ValueError:
        raise ConfigError(f"{setting}: not a PostgreSQL URL: {USE}") from None
    if not parts.netloc and not parts.path.strip("/") and not parts.query:
        raise ConfigError(f"{setting}: the PostgreSQL URL names no server or database: {USE}")
    return Database("postgres", value)


def _sqlite(path: str) -> Database:
    return Database("sqlite", "sqlite:///" + str(Path(path).expanduser().resolve()))


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs and error messages;
    :func:`core.store.postgres.base.mask_url`)."""
    from core.store.postgres.base import mask_url as masked

    return masked(url)


async def connect(url: str) -> asyncpg.Connection:
    """One connection to the PostgreSQL server at ``url`` (30 s to connect); ``StoreError``
    naming the server (never its password) when it fails."""
    import asyncpg

    from core.store.postgres.base import DB_ERRORS, describe_error

    try:
        return await asyncpg.connect(url, timeout=30)
    except DB_ERRORS as exc:
        raise StoreError(f"cannot open database {mask_url(url)}: {describe_error(exc)}") from None


async def open_store(
    db: Database,
    *,
    synchronous: str = "full",
    pool_size: int = 10,
    migrate: bool = False,
    notify: Notify | None = None,
) -> Store:
    """Open the store of ``db``: a SQLite file (``synchronous``: ``full`` or ``normal``) or
    a pool of ``pool_size`` PostgreSQL connections. A new store gets the whole schema; one
    that is behind is migrated only with ``migrate``. Raises ``StoreError``,
    ``SchemaBehindError`` / ``NewerSchemaError`` (:mod:`core.store.schema`)."""
    if db.sqlite:
        from core.store.sqlite.store import SQLiteStore

        return await SQLiteStore.open(
            str(db.path), synchronous=synchronous, migrate=migrate, notify=notify
        )
    from core.store.postgres.store import PostgresStore

    return await PostgresStore.open(db.url, pool_size=pool_size, migrate=migrate)


async def read_schema(db: Database) -> SchemaState | None:
    """The schema state of ``db``, read only; None when there is no SQLite file there.
    ``StoreError`` when the file or server cannot be read."""
    from core.store.migrations import migrations_of
    from core.store.schema import state_of_rows

    known = [(n, name) for n, name, _ in migrations_of(db.backend)]
    if db.sqlite:
        import aiosqlite

        from core.store.sqlite.base import schema_rows

        if not await asyncio.to_thread(db.path.exists):
            return None
        try:  # read-write (never creating): the last connection to close removes the -wal
            async with aiosqlite.connect(f"{db.path.as_uri()}?mode=rw", uri=True) as conn:
                rows = await schema_rows(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read database {db.path}: {exc}") from None
        return state_of_rows(rows, known)
    from core.store.postgres.base import DB_ERRORS, describe_error, pg_schema_rows

    conn = await connect(db.url)
    try:
        return state_of_rows(await pg_schema_rows(conn), known)
    except DB_ERRORS as exc:
        raise StoreError(f"cannot read {db.where}: {describe_error(exc)}") from None
    finally:
        await conn.close()


async def server_version(db: Database) -> str | None:
    """What a PostgreSQL server answers to ``SELECT version()``, up to its first comma
    (``PostgreSQL 15.14 (Debian ...)``); None for SQLite."""
    if db.sqlite:
        return None
    from core.store.postgres.base import DB_ERRORS, describe_error

    conn = await connect(db.url)
    try:
        return str(await conn.fetchval("SELECT version()")).split(",", 1)[0]
    except DB_ERRORS as exc:
        raise StoreError(f"cannot read {db.where}: {describe_error(exc)}") from None
    finally:
        await conn.close()


async def backup(db: Database, target: Path) -> int:
    """``selfmind db backup``: a consistent copy of the SQLite store of ``db`` in the new
    file ``target`` (:func:`core.store.sqlite.backup.backup_file`); returns its page count.
    ``ConfigError`` for PostgreSQL (pg_dump backs it up)."""
    if not db.sqlite:
        raise ConfigError("db backup copies a SQLite store; back up PostgreSQL with pg_dump")
    from core.store.sqlite.backup import backup_file

    return await backup_file(db.path, target)


@dataclass(frozen=True)
class MigrateReport:
    """Migrations applied by this run, all applied migrations in order, and the backup
    taken before (a SQLite file that had migrations to apply), if any."""

    applied_now: tuple[str, ...]
    applied: tuple[str, ...]
    backup: Path | None = None


async def migrate(
    db: Database,
    *,
    backup: bool = True,
    backup_path: Path | None = None,
    notify: Notify | None = None,
    dry_run: bool = False,
) -> MigrateReport:
    """Create or update the schema of ``db`` (``selfmind db migrate``).

    ``dry_run``: apply the pending migrations to a copy (SQLite: a backup in a temporary
    folder, removed after; PostgreSQL: one transaction rolled back), saying the same lines,
    and leave the store as it is; ``applied_now`` names what a real run would apply.

    Idempotent. A SQLite file with migrations to apply is first backed up (unless not
    ``backup``) to ``backup_path`` or :func:`~core.store.sqlite.backup.before_migrate_path`.
    ``notify`` gets each line to show as it happens: the backup and how to restore it (or,
    on PostgreSQL, that none was taken), what a migration will change in stored memories
    before it runs and what it did (:mod:`core.store.effects`), ``applied NAME``.
    Raises ``StoreError`` / ``MigrationError``, ``NewerSchemaError`` for a store a newer
    SelfMind wrote (nothing changed), ``MemoryInputError`` when the backup cannot be written.
    """
    from core.store.schema import check_schema

    say = notify or (lambda line: None)
    if dry_run:
        return await _dry_run(db, notify)
    state = await read_schema(db)
    if db.sqlite:
        from core.store.sqlite.backup import backup_file, before_migrate_path, restore_hint
        from core.store.sqlite.store import SQLiteStore

        taken: Path | None = None
        if state is not None:
            check_schema(state, where=f"database {db.path}", apply=True)
            if backup and state.pending and not state.fresh:
                taken = (backup_path or before_migrate_path(db.path)).expanduser().absolute()
                await backup_file(db.path, taken)
                say(f"backed up the database to {taken}")
                say(restore_hint(taken, db.path))
        store = await SQLiteStore.open(str(db.path), migrate=True, notify=notify)
        try:
            applied = tuple(await store.applied_migrations())
        finally:
            await store.close()
        return MigrateReport(store.migrated, applied, taken)
    from core.store.postgres.base import DB_ERRORS, apply_migrations, describe_error

    if state is not None and state.pending and not state.fresh and not state.unknown:
        say(
            "no backup taken (PostgreSQL): to undo this upgrade, restore the pg_dump you took"
            " before it and reinstall the SelfMind you had"
        )
    conn = await connect(db.url)
    try:
        now = await apply_migrations(conn, apply=True, where=db.where, notify=notify)
        names = await conn.fetch("SELECT name FROM schema_migrations ORDER BY number")
        return MigrateReport(tuple(now), tuple(str(r[0]) for r in names))
    except DB_ERRORS as exc:
        raise StoreError(f"cannot migrate {db.where}: {describe_error(exc)}") from None
    finally:
        await conn.close()


async def _dry_run(db: Database, notify: Notify | None) -> MigrateReport:
    """:func:`migrate` with ``dry_run``: the migrations run on a copy."""
    from core.store.schema import check_schema

    state = await read_schema(db)
    if state is None:
        raise StoreError(f"no memory database at {db.where}")
    check_schema(state, where=f"database {db.where}", apply=True)
    applied = tuple(name for _, name in state.applied)
    if db.sqlite:
        from core.store.sqlite.backup import backup_file
        from core.store.sqlite.store import SQLiteStore

        with tempfile.TemporaryDirectory(prefix="selfmind-dry-run-") as folder:
            copy = Path(folder) / db.path.name
            await backup_file(db.path, copy)
            store = await SQLiteStore.open(str(copy), migrate=True, notify=notify)
            await store.close()
        return MigrateReport(store.migrated, applied)
    from core.store.postgres.base import DB_ERRORS, apply_migrations, describe_error

    conn = await connect(db.url)
    try:
        outer = conn.transaction()
        await outer.start()
        try:  # each migration's own transaction is a savepoint inside this one
            now = await apply_migrations(conn, apply=True, where=db.where, notify=notify)
        finally:
            await outer.rollback()
        return MigrateReport(tuple(now), applied)
    except DB_ERRORS as exc:
        raise StoreError(f"cannot migrate {db.where}: {describe_error(exc)}") from None
    finally:
        await conn.close()
