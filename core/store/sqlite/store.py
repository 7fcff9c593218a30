"""SQLite memory store: aiosqlite, one long-lived connection, WAL, FTS5 BM25 recall.

Index design. Each memory's FTS5 row holds index terms made in Python, every term prefixed
with its owner's numeric id (``u17_prefer u17_dark u17_mode``; :func:`core.rules.text.index_terms`).
A recall query is an OR of the user's own prefixed terms, so FTS5 reads only that user's
postings: the cost grows with the user's memories, not with the file (no store-wide result
filtered by user).

Ranking. FTS5's ``bm25()`` counts documents over the whole table (and here no lengths: the
table keeps none), which would let other users' memories shift a user's ranking. So ``bm25()`` only
picks candidates (the best ``max(10 * k, 60)``), which are then re-scored with Okapi BM25
(:func:`core.rules.bm25.rescore`, shared with the PostgreSQL store) using the user's own
statistics: N and average length from ``users`` (kept by triggers) and document frequencies
from ``fts5vocab`` (terms are per user, so these are the user's own).
Within the candidate pool the ranking is exactly per-user BM25; it can differ only when a
document that per-user BM25 would rank in the top ``k`` falls outside the candidate pool.

The store is its connection and four parts over it (:mod:`core.store.composed`).
Connection, durability and migrations: :mod:`core.store.sqlite.base`; conversation turns, event
claims, memory modes, usage and pending actions: :mod:`core.store.sqlite.conversations`; a
channel's memory: :mod:`core.store.sqlite.channels`; embeddings:
:mod:`core.store.sqlite.vectors`; the recall log: :mod:`core.store.sqlite.uses`; memory writes,
cleanup changes and erasure (SQL only; the rules: :mod:`core.store.memories`):
:mod:`core.store.sqlite.tx`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from core.rules.bm25 import candidate_pool, rescore
from core.rules.places import check_reaches, parse_place
from core.rules.text import query_terms
from core.store.composed import ComposedStore, Parts
from core.store.memories import MemoryTx
from core.store.rows import ONE_COPY, ONE_COPY_COUNT, memory_filter
from core.store.sqlite.base import NOW_ROWS, SQLiteBase, day, dt
from core.store.sqlite.channels import SQLiteChannels
from core.store.sqlite.conversations import SQLiteConversations
from core.store.sqlite.migrations import FTS_SHARDS, fts_table
from core.store.sqlite.tx import SQLiteTx
from core.store.sqlite.uses import SQLiteRecallLog
from core.store.sqlite.vectors import SQLiteVectors
from core.types import Memory, MemoryEvent, MemoryStats, ScoredMemory, UserSummary

logger = logging.getLogger(__name__)

FORGET_BATCH = 5000
"""Memories deleted per transaction by ``forget_all`` (about 0.2 s of write lock each)."""

T = TypeVar("T")

_MEMORY_COLUMNS = (
    "m.id, u.user_key, m.text, m.kind, m.category, m.source, m.origin, m.created_at, "
    "m.updated_at, m.conversation_key, m.superseded_by, m.about, m.valid_from, m.valid_until,"
    " m.place"
)


def _memory(row: Sequence[Any]) -> Memory:
    return Memory(
        id=row[0],
        user_key=row[1],
        text=row[2],
        kind=row[3],
        category=row[4],
        source=row[5],
        origin=row[6],
        created_at=dt(row[7]),
        updated_at=dt(row[8]),
        conversation_key=row[9],
        superseded_by=row[10],
        about=row[11],
        valid_from=day(row[12]),
        valid_until=day(row[13]),
        place=parse_place(row[14]),
    )


class SQLiteStore(ComposedStore, SQLiteBase):
    """The SQLite store (:class:`core.store.seams.Store`); open with ``open``. Its connection
    (:class:`core.store.sqlite.base.SQLiteBase`) and four parts over it
    (:mod:`core.store.composed`): :class:`SQLiteConversations`, :class:`SQLiteChannels`,
    :class:`SQLiteVectors`, :class:`SQLiteRecallLog`. Its memory writes are the shared rules
    (:class:`core.store.memories.MemoryRules`) over :class:`core.store.sqlite.tx.SQLiteTx`;
    here are only its memory reads and recall."""

    parts = Parts(SQLiteConversations, SQLiteChannels, SQLiteVectors, SQLiteRecallLog)
    forget_batch = FORGET_BATCH

    async def _transact(
        self, work: Callable[[MemoryTx], Awaitable[T]], *, retry: bool = False
    ) -> T:
        # One writer: no deadlock to retry.
        async with self._write():
            return await work(SQLiteTx(self))

    async def _after_erase(self) -> None:
        """The WAL is checkpointed and truncated, so no byte of an erased text stays in the
        database, ``-wal`` or ``-shm`` file (:meth:`_truncate_wal`)."""
        await self._truncate_wal()

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetchall(
            "SELECT user_key FROM users WHERE n_docs >= ? ORDER BY uid", (at_least,)
        )
        return [r[0] for r in rows]

    # ---------------------------------------------------------------- reads
    async def get(self, *, user_key: str, memory_id: int) -> Memory | None:
        row = await self._fetchone_now(
            f"SELECT {_MEMORY_COLUMNS} FROM memories m JOIN users u ON u.uid = m.uid"
            " WHERE m.id = ? AND u.user_key = ?",
            (memory_id, user_key),
        )
        return _memory(row) if row else None

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
        # A page of the profile's size runs on the event loop's thread (SQLiteBase._fetchall_now).
        fetch = self._fetchall_now if offset + limit <= NOW_ROWS else self._fetchall
        rows = await fetch(
            f"SELECT {_MEMORY_COLUMNS} FROM memories m JOIN users u ON u.uid = m.uid"
            f" WHERE m.uid = ?{where} ORDER BY m.id DESC LIMIT ? OFFSET ?",
            (uid, max(0, limit), max(0, offset)),
        )
        return [_memory(r) for r in rows]

    async def count(self, *, user_key: str, one_copy: bool = False) -> int:
        if one_copy:
            row = await self._fetchone_now(ONE_COPY_COUNT.format("?"), (user_key,))
        else:
            row = await self._fetchone_now(
                "SELECT n_docs FROM users WHERE user_key = ?", (user_key,)
            )
        return int(row[0]) if row else 0

    async def export(self, *, user_key: str) -> list[Memory]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        rows = await self._fetchall(
            f"SELECT {_MEMORY_COLUMNS} FROM memories m JOIN users u ON u.uid = m.uid"
            " WHERE m.uid = ? AND m.superseded_by IS NULL ORDER BY m.id",
            (uid,),
        )
        return [_memory(r) for r in rows]

    async def history(
        self, *, user_key: str, limit: int = 1000, newest_first: bool = False
    ) -> list[MemoryEvent]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        rows = await self._fetchall(
            "SELECT memory_id, event, at, conversation_key, related_id, change_id"
            " FROM memory_events"
            f" WHERE uid = ? ORDER BY id{' DESC' if newest_first else ''} LIMIT ?",
            (uid, limit),
        )
        return [
            MemoryEvent(
                memory_id=r[0],
                event=r[1],
                at=dt(r[2]),
                conversation_key=r[3],
                related_id=r[4],
                change_id=r[5],
            )
            for r in rows
        ]

    async def stats(self, *, user_key: str | None = None) -> MemoryStats:
        where, params = f"WHERE m.superseded_by IS NULL{ONE_COPY}", ()
        if user_key is not None:
            uid = await self._uid(user_key)
            if uid is None:
                return MemoryStats(total=0)
            where, params = where + " AND m.uid = ?", (uid,)  # type: ignore[assignment]
        by_kind = {
            r[0]: r[1]
            for r in await self._fetchall(
                f"SELECT kind, COUNT(*) FROM memories m {where} GROUP BY kind", params
            )
        }
        by_category = {
            r[0]: r[1]
            for r in await self._fetchall(
                f"SELECT category, COUNT(*) FROM memories m {where} GROUP BY category", params
            )
        }
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
        return await self._search(uid, user_key, query, k, reach, pool)

    async def _search(
        self,
        uid: int,
        user_key: str,
        query: str,
        k: int,
        reach: Sequence[str] | None,
        pool: int | None = None,
    ) -> list[ScoredMemory]:
        terms = query_terms(uid, query)
        if not terms:
            return []
        # Terms are [a-z0-9_] only, so quoting them cannot break out of the FTS5 syntax.
        match = " OR ".join(f'"{t}"' for t in terms)
        if reach is not None:
            chosen = check_reaches(reach)
            if not chosen:
                return []
            # The place rule pushed into FTS5: one marker term per memory, its reach.
            marks = " OR ".join(f'"u{uid}__{r}"' for r in chosen)
            match = f"({match}) AND ({marks})"
        fts = fts_table(uid)
        vocab = f"memories_vocab_{uid % FTS_SHARDS}"
        pool = candidate_pool(k, pool)

        def search_now(conn: sqlite3.Connection) -> list[tuple[sqlite3.Row, float]]:
            # One hop to the reader's thread for the whole search (candidates, statistics,
            # re-scoring, rows), not four: each hop is a thread switch that a loaded event
            # loop waits for (profile plus BM25 recall at 10,000 memories: 2.13 against 2.37
            # ms CPU p50 on a loaded 2-core machine).
            # Candidates by FTS5's bm25() over this user's postings only, then exact
            # re-scoring with the user's own statistics.
            rows = conn.execute(
                "SELECT m.id, m.terms, m.n_terms FROM ("
                f"  SELECT rowid AS id FROM {fts}"
                f"  WHERE {fts} MATCH ? ORDER BY bm25({fts}) LIMIT ?"
                ") f JOIN memories m ON m.id = f.id",
                (match, pool),
            ).fetchall()
            if not rows:
                return []
            stats = conn.execute(
                "SELECT NULL, n_docs, total_len FROM users WHERE uid = ? UNION ALL"
                f" SELECT term, doc, 0 FROM {vocab} WHERE term IN ({','.join('?' * len(terms))})",
                (uid, *terms),
            ).fetchall()
            n_docs, total_len = stats[0][1], stats[0][2]
            doc_freqs = {t: df for t, df, _ in stats[1:]}
            scores = rescore(rows, doc_freqs, n_docs=n_docs, total_len=total_len)
            best = dict((memory_id, score) for score, memory_id in scores[:k])
            found = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories m JOIN users u ON u.uid = m.uid"
                f" WHERE m.id IN ({','.join('?' * len(best))})",
                list(best),
            ).fetchall()
            return [(r, best[r[0]]) for r in found]

        found = await self._read_on_thread(search_now)
        scored = [ScoredMemory(memory=_memory(r), score=score) for r, score in found]
        scored.sort(key=lambda s: (-s.score, -s.memory.id))
        return scored[:k]

    # ---------------------------------------------------------------- operators
    async def users(self, *, user_key: str | None = None) -> list[UserSummary]:
        only, params = (
            ("= ?", (user_key, user_key)) if user_key is not None else ("IS NOT NULL", ())
        )
        rows = await self._fetchall(
            "WITH k(user_key) AS ("
            f"  SELECT user_key FROM users WHERE user_key {only}"
            f"  UNION SELECT user_key FROM turns WHERE user_key {only})"
            " SELECT k.user_key,"
            "  (SELECT COUNT(*) FROM memories m JOIN users u ON u.uid = m.uid"
            "   WHERE u.user_key = k.user_key AND m.superseded_by IS NULL),"
            "  (SELECT COUNT(*) FROM turns t WHERE t.user_key = k.user_key),"
            "  (SELECT MAX(t.sent_at) FROM turns t WHERE t.user_key = k.user_key),"
            "  (SELECT MAX(e.at) FROM memory_events e JOIN users u ON u.uid = e.uid"
            "   WHERE u.user_key = k.user_key)"
            " FROM k ORDER BY k.user_key",
            params,
        )
        return [
            UserSummary(
                user_key=r[0],
                memories=r[1],
                turns=r[2],
                last_active=max((dt(v) for v in (r[3], r[4]) if v is not None), default=None),
            )
            for r in rows
        ]
