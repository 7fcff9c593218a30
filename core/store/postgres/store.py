"""PostgreSQL memory store: asyncpg, a connection pool, BM25 recall over a GIN-indexed
``tsvector``, safe for several bot processes (replicas) sharing one database.

Select it with ``SELFMIND_DB=postgresql://user:password@host:5432/dbname``
(:func:`core.store.seams.open_store`). Same protocol, semantics and errors as
:mod:`core.store.sqlite.store`; SQLite stays the embedded default.

Index design. Each memory keeps the index terms made in Python, every term prefixed with its
owner's numeric id (``u17_prefer u17_dark``; :func:`core.rules.text.index_terms`), and a stored
generated ``tsvector`` with one lexeme per distinct term, GIN-indexed over active memories
only. A recall query ``'u17_dark' | 'u17_mode'`` therefore reads only that user's postings.

Ranking, in one round trip (:mod:`core.store.postgres.recall`). Among the user's active memories
holding any query term (the GIN index finds them) one SQL statement counts each term's
document frequency, so the statistics are the user's own as in SQLite (N and total length
from ``users``, kept by statement triggers), and keeps the best ``max(10 * k, 60)`` by BM25
with every term counted once; :func:`core.rules.bm25.rescore` - the very function the SQLite store
uses - then ranks that pool by exact Okapi BM25 (term counts included).

Where results can differ from SQLite. Both backends rank their candidate pool with the same
statistics and the same function, so a memory in both pools gets the same score to the last
bit, and ties break the same way (newer id first). Only the pools differ: SQLite picks its
pool by FTS5's ``bm25()``, which ignores document length and counts N over the whole file;
PostgreSQL picks it by BM25 with the user's own N and lengths, ignoring only repeats of a
term within one memory. So PostgreSQL's top ``k`` is exactly per-user BM25 except when a
memory that repeats a query term would climb from outside the pool, and SQLite's can miss a
short memory that FTS5's length-blind ranking left out. On LoCoMo (``bench/retrieval.py
--backend postgres``) Hit@1/6/10 are 0.436/0.624/0.666 against SQLite's 0.436/0.625/0.668;
on one conversation PostgreSQL's top 6 equals exhaustive per-user BM25 for 146 of 150
questions, SQLite's for 110.

Across replicas, and erasure: :mod:`core.store.postgres.tx`.

The store is its connection and four parts over it (:mod:`core.store.composed`).
Connection, replicas and locks: :mod:`core.store.postgres.base`; turns, event claims, modes,
usage, pending actions and the reflection lock: :mod:`core.store.postgres.conversations`; a
channel's memory: :mod:`core.store.postgres.channels`; the recall log:
:mod:`core.store.postgres.uses`; memory writes, cleanup changes and
erasure (SQL only; the rules: :mod:`core.store.memories`): :mod:`core.store.postgres.tx`;
embeddings: :mod:`core.store.postgres.vectors`; schema:
:mod:`core.store.postgres.migrations`; moving a SQLite file in: :mod:`core.store.postgres.admin`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from core.store.composed import ComposedStore, Parts
from core.store.memories import MemoryTx
from core.store.postgres.base import PostgresBase
from core.store.postgres.channels import PostgresChannels
from core.store.postgres.conversations import PostgresConversations
from core.store.postgres.recall import MEMORY_COLUMNS, memory_from_row, search_user
from core.store.postgres.tx import PostgresTx
from core.store.postgres.uses import PostgresRecallLog
from core.store.postgres.vectors import PostgresVectors
from core.store.rows import ONE_COPY, ONE_COPY_COUNT, memory_filter
from core.types import Memory, MemoryEvent, MemoryStats, ScoredMemory, UserSummary

logger = logging.getLogger(__name__)

T = TypeVar("T")


class PostgresStore(ComposedStore, PostgresBase):
    """The PostgreSQL store (:class:`core.store.seams.Store`); open with ``await
    PostgresStore.open(url)``, close with ``close``. Its connection
    (:class:`core.store.postgres.base.PostgresBase`) and four parts over it
    (:mod:`core.store.composed`): :class:`PostgresConversations`, :class:`PostgresChannels`,
    :class:`PostgresVectors`, :class:`PostgresRecallLog`. Its memory writes are the shared
    rules (:class:`core.store.memories.MemoryRules`) over
    :class:`core.store.postgres.tx.PostgresTx`; here are only its memory reads and recall."""

    parts = Parts(PostgresConversations, PostgresChannels, PostgresVectors, PostgresRecallLog)

    async def _transact(
        self, work: Callable[[MemoryTx], Awaitable[T]], *, retry: bool = False
    ) -> T:
        if retry:
            return await self._tx_retrying(lambda conn: work(PostgresTx(self, conn)))
        async with self._tx() as conn:
            return await work(PostgresTx(self, conn))

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetch(
            "SELECT user_key FROM users WHERE n_docs >= $1 ORDER BY uid", at_least
        )
        return [str(r[0]) for r in rows]

    # ---------------------------------------------------------------- reads
    async def get(self, *, user_key: str, memory_id: int) -> Memory | None:
        uid = await self._uid(user_key)
        if uid is None:
            return None
        row = await self._fetchrow(
            f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.id = $1 AND m.uid = $2",
            memory_id,
            uid,
        )
        return memory_from_row(row, user_key) if row else None

    async def list_memories(
        self,
        *,
        user_key: str,
        limit: int = 20,
        offset: int = 0,
        include_superseded: bool = False,
        reach: Sequence[str] | None = None,
        standing: bool = False,
        one_copy: bool = False,
    ) -> list[Memory]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        where = memory_filter(
            include_superseded=include_superseded, standing=standing, reach=reach, one_copy=one_copy
        )
        if where is None:
            return []
        rows = await self._fetch(
            f"SELECT {MEMORY_COLUMNS} FROM memories m"
            f" WHERE m.uid = $1{where} ORDER BY m.id DESC LIMIT $2 OFFSET $3",
            uid,
            max(0, limit),
            max(0, offset),
        )
        return [memory_from_row(r, user_key) for r in rows]

    async def count(self, *, user_key: str, one_copy: bool = False) -> int:
        if one_copy:
            n = await self._fetchval(ONE_COPY_COUNT.format("$1"), user_key)
        else:
            n = await self._fetchval("SELECT n_docs FROM users WHERE user_key = $1", user_key)
        return int(n) if n is not None else 0

    async def export(self, *, user_key: str) -> list[Memory]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        rows = await self._fetch(
            f"SELECT {MEMORY_COLUMNS} FROM memories m"
            " WHERE m.uid = $1 AND m.superseded_by IS NULL ORDER BY m.id",
            uid,
        )
        return [memory_from_row(r, user_key) for r in rows]

    async def history(
        self, *, user_key: str, limit: int = 1000, newest_first: bool = False
    ) -> list[MemoryEvent]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        rows = await self._fetch(
            "SELECT memory_id, event, at, conversation_key, related_id, change_id"
            f" FROM memory_events WHERE uid = $1 ORDER BY id{' DESC' if newest_first else ''}"
            " LIMIT $2",
            uid,
            limit,
        )
        return [
            MemoryEvent(
                memory_id=r[0],
                event=r[1],
                at=r[2],
                conversation_key=r[3],
                related_id=r[4],
                change_id=r[5],
            )
            for r in rows
        ]

    async def stats(self, *, user_key: str | None = None) -> MemoryStats:
        where, params = f"WHERE m.superseded_by IS NULL{ONE_COPY}", []
        if user_key is not None:
            uid = await self._uid(user_key)
            if uid is None:
                return MemoryStats(total=0)
            where, params = where + " AND m.uid = $1", [uid]
        rows = await self._fetch(
            f"SELECT kind, category, count(*) FROM memories m {where} GROUP BY kind, category",
            *params,
        )
        by_kind: dict[str, int] = {}
        by_category: dict[str, int] = {}
        for kind, category, n in rows:
            by_kind[kind] = by_kind.get(kind, 0) + n
            by_category[category] = by_category.get(category, 0) + n
        return MemoryStats(total=sum(by_kind.values()), by_kind=by_kind, by_category=by_category)

    # ---------------------------------------------------------------- recall
    async def search(
        self,
        *,
        user_key: str,
        query: str,
        k: int,
        reach: Sequence[str] | None = None,
        pool: int | None = None,
    ) -> list[ScoredMemory]:
        uid = await self._uid(user_key)
        if uid is None or k <= 0:
            return []
        with self._errors():
            async with self._pool.acquire() as conn:
                return await search_user(conn, uid, user_key, query, k, reach, pool)

    # ---------------------------------------------------------------- operators
    async def users(self, *, user_key: str | None = None) -> list[UserSummary]:
        only, args = ("= $1", (user_key,)) if user_key is not None else ("IS NOT NULL", ())
        rows = await self._fetch(
            "WITH k(user_key) AS ("
            f"  SELECT user_key FROM users WHERE user_key {only}"
            f"  UNION SELECT user_key FROM turns WHERE user_key {only})"
            " SELECT k.user_key,"
            "  (SELECT COUNT(*) FROM memories m JOIN users u ON u.uid = m.uid"
            "   WHERE u.user_key = k.user_key AND m.superseded_by IS NULL) AS memories,"
            "  (SELECT COUNT(*) FROM turns t WHERE t.user_key = k.user_key) AS turns,"
            "  GREATEST("
            "   (SELECT MAX(t.sent_at) FROM turns t WHERE t.user_key = k.user_key),"
            "   (SELECT MAX(e.at) FROM memory_events e JOIN users u ON u.uid = e.uid"
            "    WHERE u.user_key = k.user_key)) AS last_active"
            ' FROM k ORDER BY k.user_key COLLATE "C"',
            *args,
        )
        return [
            UserSummary(
                user_key=r["user_key"],
                memories=int(r["memories"]),
                turns=int(r["turns"]),
                last_active=r["last_active"],
            )
            for r in rows
        ]
