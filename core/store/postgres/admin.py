"""Database administration: copy a SQLite memory file into PostgreSQL (migrating, backing up
and reading a store's schema are :mod:`core.store.database`'s).

:func:`copy_sqlite_to_postgres` moves everything a SQLite store holds - users, memories
(active and superseded, with their ids, so events and ``superseded_by`` still point at the
right rows), memory events, embeddings, memory uses (recalls, confirmations), conversation
turns (the reflection queue included, and the crash-recovery data: the thread a message was
said in, ``thread_ref``, and the messages its answer shows, ``reply_ref``), claimed event
ids, memory modes, marks, usage, channels and who said their memory's entries (team
memory), the users' ratings of answers (``feedback``) and the tokens behind chat buttons
(``pending_actions``: an Undo button lives for the 7-day undo window) - into an empty
PostgreSQL database in one transaction, with ``COPY``. Every other
table of the SQLite file is named in :data:`NOT_COPIED` with the reason (derived and rebuilt
by the target, or the target's own). One way only: nothing copies PostgreSQL into SQLite.
Memory ids, user ids and turn ids are kept, so the index terms (``u{uid}_...``) stay valid;
identity sequences continue after the largest id (for memories, after the largest id the
history names, for turns after every id usage names, so a forgotten id is never reused);
ratings and button tokens have no id (their keys are the text they carry). Per-user BM25
statistics are recomputed by the target's triggers. At the end every table is counted on
both sides (and the users' active-memory totals compared); a mismatch is reported, not
hidden. Turns that were waiting for a reflection arrive unclaimed, so the first replica that
starts takes them over.

Text is cleaned on the way (:mod:`core.store.text_repair`, the rule of migration
``m007_clean_text``): a SQLite file may hold NUL or control characters written by an older
version, and PostgreSQL refuses NUL in text. Memories get their normalised text remade from
the clean text (the index terms are words only, already clean); turns keep their newlines.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg

from core.errors import ConfigError, StoreError
from core.store.database import connect, database, read_schema
from core.store.postgres.base import DB_ERRORS, apply_migrations, describe_error, mask_url
from core.store.schema import check_schema
from core.store.sqlite.base import dt
from core.store.sqlite.migrations import FTS_SHARDS
from core.store.text_repair import memory_text, turn_text

logger = logging.getLogger(__name__)

BATCH_ROWS = 5_000
"""Rows read from SQLite and sent per ``COPY``."""

ProgressCallback = Callable[[str, int, int], None]
"""``(table, rows copied so far, rows in the table)``."""


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    times: tuple[str, ...] = ()  # ISO text in SQLite, timestamptz in PostgreSQL
    order: str = "rowid"
    identity: str | None = None  # column whose sequence continues after the copy
    clean: Callable[[list[Any]], None] | None = None  # rewrites one row's text in place
    bools: tuple[str, ...] = ()  # INTEGER 0/1 in SQLite, boolean in PostgreSQL


def _clean_memory(row: list[Any]) -> None:
    # id, uid, text, norm, ...: the index terms stay the source's (words only, so already
    # clean), which keeps the BM25 totals the copy compares equal on both sides.
    new = memory_text(int(row[1]), row[2])
    row[2:4] = [new.text, new.norm]
    # valid_from, valid_until: ISO days in SQLite, date in PostgreSQL.
    for i in _MEMORY_DAYS:
        row[i] = None if row[i] is None else date.fromisoformat(row[i])


def _clean_turn(row: list[Any]) -> None:
    # id, conversation_key, user_key, role, author, text, ...
    row[5], row[4] = turn_text(row[5], row[4])


_MEMORY_COLUMNS = (
    "id",
    "uid",
    "text",
    "norm",
    "terms",
    "n_terms",
    "kind",
    "category",
    "source",
    "origin",
    "conversation_key",
    "created_at",
    "updated_at",
    "superseded_by",
    "superseded_at",
    "about",
    "valid_from",
    "valid_until",
    "place",
    "reach",
)
_MEMORY_DAYS = tuple(_MEMORY_COLUMNS.index(c) for c in ("valid_from", "valid_until"))
"""Where a memory row's days are (ISO text in SQLite, date in PostgreSQL)."""

# In dependency order (users before memories ...).
TABLES: tuple[_Table, ...] = (
    _Table("users", ("uid", "user_key", "created_at"), ("created_at",), "uid", "uid"),
    _Table(
        "memories",
        _MEMORY_COLUMNS,
        ("created_at", "updated_at", "superseded_at"),
        "id",
        "id",
        _clean_memory,
    ),
    _Table(
        "memory_events",
        ("id", "uid", "memory_id", "event", "at", "conversation_key", "related_id", "change_id"),
        ("at",),
        "id",
        "id",
    ),
    _Table("memory_embeddings", ("memory_id", "uid", "model", "vector"), (), "memory_id"),
    _Table(
        "memory_uses",
        ("memory_id", "uid", "recalls", "last_recalled_at", "confirmations"),
        ("last_recalled_at",),
        "memory_id",
    ),
    # A channel's own memory (team memory): its settings, its conversations and who said
    # each entry (the entries themselves are memories owned by the channel key, above).
    _Table(
        "channels",
        (
            "channel_key",
            "platform",
            "workspace",
            "channel",
            "kind",
            "memory_on",
            "memory_kind",
            "changed_by",
            "changed_at",
            "allowed",
            "version",
            "seen_at",
        ),
        ("changed_at", "seen_at"),
        "channel_key",
        bools=("memory_on",),
    ),
    _Table(
        "channel_entries",
        ("memory_id", "channel_key", "said_by", "said_by_name", "said_at", "link", "changed_by"),
        ("said_at",),
        "memory_id",
    ),
    _Table(
        "turns",
        (
            "id",
            "conversation_key",
            "user_key",
            "role",
            "author",
            "text",
            "origin",
            "sent_at",
            "created_at",
            "reply_to",
            "reflection",
            "attempts",
            "platform_ref",
            "workspace",
            "reply_ref",
            "thread_ref",
            "place",
        ),
        ("sent_at", "created_at"),
        "id",
        "id",
        _clean_turn,
    ),
    _Table("processed_events", ("event_key", "claimed_at"), ("claimed_at",), "event_key"),
    _Table("memory_modes", ("user_key", "mode", "updated_at"), ("updated_at",), "user_key"),
    _Table("marks", ("mark", "at"), ("at",), "mark"),
    _Table(
        "usage",
        (
            "id",
            "at",
            "user_key",
            "workspace",
            "kind",
            "model",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "turn_id",
        ),
        ("at",),
        "id",
        "id",
    ),
    # Users' ratings of answers: keyed by the answered message and the user key (text, as
    # the SQLite file has them), no id and so no sequence to continue.
    _Table(
        "feedback",
        ("answer_ref", "user_key", "workspace", "positive", "at"),
        ("at",),
        "answer_ref, user_key",
        bools=("positive",),
    ),
    # Button tokens (cleanup plans, Undo, Forget everything): short-lived, but an Undo
    # button works for the 7-day undo window, so they move too. Expired rows come along and
    # stay unusable (every read checks expires_at); the target purges them on its next write.
    _Table(
        "pending_actions",
        ("token", "user_key", "kind", "payload", "expires_at"),
        ("expires_at",),
        "token",
    ),
)

NOT_COPIED: dict[str, str] = {
    # The target records its own migrations, written by apply_migrations when it gets the
    # schema; the numbers differ (PostgreSQL's m007_pending_actions is SQLite's m008).
    "schema_migrations": "the target's own record of the migrations it applied",
    # FTS5 indexes of the active memories' terms (m006: one shard per uid % FTS_SHARDS),
    # and fts5vocab views of them that hold no rows of their own. PostgreSQL indexes the
    # copied memories.terms itself (a GIN index); SQLite's FTS5 shadow tables
    # (memories_fts_N_data, ...) and its own sqlite_* tables are SQLite's internals
    # (sqlite_sequence is read to continue the identities).
    **{
        f"memories_fts_{n}": "derived: the target indexes memories.terms" for n in range(FTS_SHARDS)
    },
    **{f"memories_vocab_{n}": "a view of memories_fts_N, no rows" for n in range(FTS_SHARDS)},
}
"""The SQLite store's tables ``db copy`` leaves behind on purpose, with the reason. Every
other table is in :data:`TABLES` (a test holds the two lists to a freshly migrated store)."""


@dataclass(frozen=True)
class TableCount:
    """Rows of one table (or one derived total) in the source and the target."""

    table: str
    source: int
    target: int

    @property
    def equal(self) -> bool:
        return self.source == self.target


@dataclass(frozen=True)
class CopyReport:
    """What a copy moved; ``ok`` when every count matches."""

    counts: tuple[TableCount, ...]

    @property
    def ok(self) -> bool:
        return all(c.equal for c in self.counts)


def _read_only(path: str) -> str:
    return Path(path).expanduser().resolve().as_uri() + "?mode=ro"


async def copy_sqlite_to_postgres(
    source_url: str, target_url: str, *, progress: ProgressCallback | None = None
) -> CopyReport:
    """Copy the SQLite store at ``source_url`` into the empty PostgreSQL database at
    ``target_url`` (given the schema if it has none), then count every table on both sides.

    Raises ``ConfigError`` for wrong URL schemes, ``StoreError`` when either database cannot
    be used or the target already holds data, ``SchemaBehindError`` / ``NewerSchemaError``
    when either is not at this version's schema (nothing is written then).
    """
    source, target = database(source_url, setting="--from"), database(target_url, setting="--to")
    if not source.sqlite:
        raise ConfigError(f"--from must be a SQLite file or sqlite:/// URL, not {source.where!r}")
    if source.sqlite == target.sqlite:
        raise ConfigError(f"--to must be a postgresql:// URL, not {target.where!r}")
    path, target_url = str(source.path), target.url
    state = await read_schema(source)
    if state is None:
        raise StoreError(f"no memory database at {path} (nothing to copy)")
    check_schema(state, where=f"database {path}", apply=False)
    conn = await connect(target_url)
    try:
        await apply_migrations(conn, apply=False, where=mask_url(target_url))  # a new one
        async with aiosqlite.connect(_read_only(path), uri=True) as src:
            present = {
                str(r[0]) for r in await src.execute_fetchall("SELECT name FROM sqlite_master")
            }
            tables = [t for t in TABLES if t.name in present]
            async with conn.transaction():
                await _require_empty(conn, target_url)
                for table in tables:
                    await _copy_table(src, conn, table, progress)
                for table in tables:
                    if table.identity is not None:
                        await _continue_identity(conn, table, await _sqlite_sequence(src, table))
            report = await _compare(src, conn, tables)
    except DB_ERRORS as exc:
        raise StoreError(f"copy to {mask_url(target_url)} failed: {describe_error(exc)}") from None
    finally:
        await conn.close()
    logger.info("copied %s into %s: ok=%s", path, mask_url(target_url), report.ok)
    return report


async def _sqlite_sequence(src: aiosqlite.Connection, table: _Table) -> int:
    """The largest id the SQLite store ever gave in ``table`` (``sqlite_sequence``, kept by
    AUTOINCREMENT: m011 and m016 started it after every id the store had named); 0 when the
    table has none."""
    rows = await src.execute_fetchall(
        "SELECT seq FROM sqlite_sequence WHERE name = ?", (table.name,)
    )
    return max((int(r[0]) for r in rows), default=0)


async def _continue_identity(conn: asyncpg.Connection, table: _Table, given: int) -> None:
    # New ids start after the largest copied one and after ``given``, the largest the SQLite
    # store ever gave (a forgotten memory's or a deleted turn's id included: a recovery claim
    # recover:{id} would otherwise refuse the new turn); for memories also after every id the
    # history names; for turns after every id an answer or a usage row names.
    largest = f"SELECT MAX({table.identity}) FROM {table.name}"
    if table.name == "memories":
        largest = f"SELECT GREATEST(({largest}), (SELECT MAX(memory_id) FROM memory_events))"
    if table.name == "turns":
        largest = (
            f"SELECT GREATEST(({largest}), (SELECT MAX(reply_to) FROM turns),"
            " (SELECT MAX(turn_id) FROM usage))"
        )
    await conn.execute(
        f"SELECT setval(pg_get_serial_sequence('{table.name}', '{table.identity}'),"
        f" GREATEST(COALESCE(({largest}), 0), $1) + 1, false)",
        given,
    )


async def _require_empty(conn: asyncpg.Connection, url: str) -> None:
    for table in TABLES:
        if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table.name})"):
            raise StoreError(
                f"{mask_url(url)} already holds data (table {table.name}); copy into an empty"
                " database"
            )


async def _copy_table(
    src: aiosqlite.Connection,
    conn: asyncpg.Connection,
    table: _Table,
    progress: ProgressCallback | None,
) -> None:
    total = await _sqlite_value(src, f"SELECT count(*) FROM {table.name}")
    times = [table.columns.index(c) for c in table.times]
    bools = [table.columns.index(c) for c in table.bools]
    done = 0

    async def batches() -> AsyncIterator[Sequence[Any]]:
        nonlocal done
        async with src.execute(
            f"SELECT {', '.join(table.columns)} FROM {table.name} ORDER BY {table.order}"
        ) as cur:
            while rows := list(await cur.fetchmany(BATCH_ROWS)):
                for row in rows:
                    yield _convert(row, times, bools, table.clean)
                done += len(rows)
                if progress is not None:
                    progress(table.name, done, total)

    await conn.copy_records_to_table(table.name, records=batches(), columns=table.columns)
    if progress is not None:
        progress(table.name, total, total)
    logger.info("copied table %s: %d rows", table.name, total)


async def _sqlite_value(src: aiosqlite.Connection, sql: str) -> int:
    rows = list(await src.execute_fetchall(sql))
    return int(rows[0][0])


def _convert(
    row: Sequence[Any],
    times: Sequence[int],
    bools: Sequence[int],
    clean: Callable[[list[Any]], None] | None,
) -> tuple[Any, ...]:
    values = list(row)
    if clean is not None:
        clean(values)
    for i in times:
        if values[i] is not None:
            values[i] = _time(values[i])
    for i in bools:
        if values[i] is not None:
            values[i] = bool(values[i])
    return tuple(values)


def _time(value: str) -> datetime:
    try:
        return dt(value)
    except ValueError:
        raise StoreError(f"unreadable timestamp {value!r} in the SQLite file") from None


async def _compare(
    src: aiosqlite.Connection, conn: asyncpg.Connection, tables: Sequence[_Table]
) -> CopyReport:
    counts = []
    for table in tables:
        source = await _sqlite_value(src, f"SELECT count(*) FROM {table.name}")
        target = await conn.fetchval(f"SELECT count(*) FROM {table.name}")
        counts.append(TableCount(table.name, int(source), int(target)))
    derived = {
        "active memories": "SELECT count(*) FROM memories WHERE superseded_by IS NULL",
        "users.n_docs (sum)": "SELECT COALESCE(SUM(n_docs), 0) FROM users",
        "users.total_len (sum)": "SELECT COALESCE(SUM(total_len), 0) FROM users",
        "positive ratings": "SELECT count(*) FROM feedback WHERE positive",
    }
    for label, sql in derived.items():
        source = await _sqlite_value(src, sql)
        counts.append(TableCount(label, int(source), int(await conn.fetchval(sql))))
    return CopyReport(tuple(counts))
