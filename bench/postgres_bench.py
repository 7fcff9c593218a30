"""PostgreSQL stores for ``bench/retrieval.py --backend postgres``.

The small store lives in a scratch database. The large one starts from the synthetic memories
(the same texts the SQLite run uses), loaded once with ``COPY`` into a database named by a
hash of its contents (texts, sizes, schema), marked as a template, and cloned for each run
(``CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY``), so reruns take seconds. The
secondary indexes are dropped during the load and rebuilt after it (faster than updating a
GIN index row by row); their definitions come from the migrations, so the clone is exactly
the schema a migrated store has.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from core.rules.text import index_terms, normalize
from core.store.postgres.base import MIGRATIONS
from core.store.postgres.store import PostgresStore
from core.store.seams import Store

BUILD_VERSION = 1
"""Bump when the way the synthetic database is built changes."""

Batches = Callable[[Sequence[str], int, int], Iterator[tuple[str, list[str]]]]


def server_url(given: str | None) -> str:
    """The server to use: ``--database-url``, else ``SELFMIND_BENCH_DATABASE_URL``, else
    ``SELFMIND_TEST_DATABASE_URL``."""
    url = (
        given
        or os.environ.get("SELFMIND_BENCH_DATABASE_URL")
        or os.environ.get("SELFMIND_TEST_DATABASE_URL")
    )
    if not url:
        raise SystemExit("--backend postgres needs --database-url or SELFMIND_BENCH_DATABASE_URL")
    return url


def database_url(server: str, name: str) -> str:
    return urlunsplit(urlsplit(server)._replace(path="/" + name))


async def admin(server: str, sql: str, *args: object) -> object:
    """Run one statement on ``server`` (``CREATE DATABASE`` ...); its first value, if any."""
    conn = await asyncpg.connect(server)
    try:
        if args:
            return await conn.fetchval(sql, *args)
        return await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def scratch_database(server: str, template: str | None = None) -> AsyncIterator[str]:
    """A new database (a clone of ``template``), dropped afterwards; yields its URL."""
    name = f"selfmind_bench_run_{secrets.token_hex(4)}"
    clone = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
    await admin(server, f'CREATE DATABASE "{name}"{clone}')
    try:
        yield database_url(server, name)
    finally:
        await admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    store = await PostgresStore.open(url, sweep_interval_s=None)
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def postgres_small(server: str) -> AsyncIterator[Store]:
    async with scratch_database(server) as url, opened(url) as store:
        yield store


@asynccontextmanager
async def postgres_big(
    server: str, batches: Batches, pool: Sequence[str], users: int, per_user: int
) -> AsyncIterator[Store]:
    template = await ensure_synthetic(server, batches, pool, users, per_user)
    async with scratch_database(server, template) as url, opened(url) as store:
        yield store


async def ensure_synthetic(
    server: str, batches: Batches, pool: Sequence[str], users: int, per_user: int
) -> str:
    """The name of the synthetic template database, built first if it does not exist."""
    key = json.dumps(
        [
            list(pool),
            users,
            per_user,
            [m[2] if isinstance(m[2], str) else m[1] for m in MIGRATIONS],
            BUILD_VERSION,
        ]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    name = f"selfmind_bench_{users}x{per_user}_{digest}"
    if await admin(server, "SELECT 1 FROM pg_database WHERE datname = $1", name):
        return name
    partial = f"{name}_partial"
    await admin(server, f'DROP DATABASE IF EXISTS "{partial}" WITH (FORCE)')
    await admin(server, f'CREATE DATABASE "{partial}"')
    t0 = time.perf_counter()
    async with opened(database_url(server, partial)):
        pass  # migrations
    conn = await asyncpg.connect(database_url(server, partial))
    try:
        await load(conn, batches(pool, users, per_user), users)
    finally:
        await conn.close()
    await admin(server, f'ALTER DATABASE "{partial}" RENAME TO "{name}"')
    await admin(server, f'ALTER DATABASE "{name}" IS_TEMPLATE true')
    print(
        f"built {users * per_user:,} synthetic memories in PostgreSQL in"
        f" {time.perf_counter() - t0:.0f} s (template database {name})",
        file=sys.stderr,
    )
    return name


async def load(
    conn: asyncpg.Connection, batches: Iterator[tuple[str, list[str]]], users: int
) -> None:
    """COPY the synthetic users, memories and their 'added' events; rebuild indexes."""
    await conn.execute("SET maintenance_work_mem = '1GB'")
    indexes = await conn.fetch(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid"
        " WHERE t.relname IN ('memories', 'memory_events') AND NOT i.indisprimary"
    )
    for name, _ in indexes:
        await conn.execute(f'DROP INDEX "{name}"')
    now = datetime.now(UTC)
    memory_id = 0
    for n, (user_key, texts) in enumerate(batches, start=1):
        uid = n
        await conn.execute(
            "INSERT INTO users(uid, user_key, created_at) VALUES ($1, $2, $3)", uid, user_key, now
        )
        rows, events, seen = [], [], set()
        for text in texts:
            norm = normalize(text)
            if norm in seen:  # the store keeps one active memory per normalised text
                continue
            seen.add(norm)
            memory_id += 1
            terms = index_terms(uid, text)
            rows.append(
                (memory_id, uid, text, norm, " ".join(terms), len(terms), "fact", "general",
                 "import", "private", now, now)
            )  # fmt: skip
            events.append((uid, memory_id, "added", now))
        await conn.copy_records_to_table(
            "memories",
            records=rows,
            columns=(
                "id", "uid", "text", "norm", "terms", "n_terms", "kind", "category", "source",
                "origin", "created_at", "updated_at",
            ),
        )  # fmt: skip
        await conn.copy_records_to_table(
            "memory_events", records=events, columns=("uid", "memory_id", "event", "at")
        )
        if sys.stderr.isatty() and n % max(1, users // 20) == 0:
            print(f"  loaded {n}/{users} synthetic users", file=sys.stderr)
    for _, definition in indexes:
        await conn.execute(definition)
    for table, column in (("users", "uid"), ("memories", "id"), ("memory_events", "id")):
        await conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
            f" COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)"
        )
    await conn.execute("VACUUM ANALYZE")
