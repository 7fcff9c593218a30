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

Connection, durability and migrations: :mod:`core.store.sqlite.base`; conversation turns, event
claims and memory modes: :mod:`core.store.sqlite.conversations`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from core.rules.about import same_person
from core.rules.bm25 import candidate_pool, rescore
from core.rules.dedupe import Deduper
from core.rules.places import check_reaches, parse_place, stored_place
from core.rules.reassert import decide
from core.rules.text import index_terms, normalize, query_terms
from core.store.rows import memory_filter
from core.store.sqlite.base import _IN_WRITE, day, day_columns, dt, ts
from core.store.sqlite.channels import SQLiteChannels
from core.store.sqlite.cleanup import SQLiteHygiene
from core.store.sqlite.conversations import SQLiteConversations, end_reflection
from core.store.sqlite.migrations import FTS_SHARDS, fts_table
from core.store.sqlite.uses import SQLiteRecallLog
from core.store.sqlite.vectors import SQLiteVectors
from core.store.writes import bulk_results, still_reflecting
from core.types import (
    AddResult,
    Memory,
    MemoryEvent,
    MemoryStats,
    MemoryWrite,
    NewMemory,
    Place,
    ScoredMemory,
    UsageRecord,
    UserSummary,
    utcnow,
)

logger = logging.getLogger(__name__)

DEDUPE_CANDIDATES = 50
"""How many BM25 neighbours of a new memory are compared by Jaccard in dedupe."""

FORGET_BATCH = 5000
"""Memories deleted per transaction by ``forget_all`` (about 0.2 s of write lock each)."""

_MEMORY_COLUMNS = (
    "m.id, u.user_key, m.text, m.kind, m.category, m.source, m.origin, m.created_at, "
    "m.updated_at, m.conversation_key, m.superseded_by, m.about, m.valid_from, m.valid_until,"
    " m.place"
)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A stored memory as dedupe sees it."""

    id: int
    text: str
    about: str | None = None
    place: Place | None = None


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


class SQLiteStore(
    SQLiteChannels, SQLiteHygiene, SQLiteVectors, SQLiteRecallLog, SQLiteConversations
):
    """The memory half of the SQLite store (:class:`core.store.seams.Store`); open with ``open``."""

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

    async def _event(
        self,
        uid: int,
        memory_id: int,
        event: str,
        at: datetime,
        conversation_key: str | None,
        related_id: int | None = None,
    ) -> None:
        await self._conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at, conversation_key, related_id)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (uid, memory_id, event, ts(at), conversation_key, related_id),
        )

    # ---------------------------------------------------------------- writes
    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        async with self._write():
            uid = cast(int, await self._uid(user_key, create=True))
            result = await self._add_superseding(uid, user_key, memory, dedupe, supersedes)
            await self._note_write(uid, [memory], [result])
            return result

    async def finish_reflection(
        self,
        *,
        turn_id: int,
        user_key: str,
        memories: Sequence[MemoryWrite],
        dedupe: Deduper,
        attempts: int,
        usage: Sequence[UsageRecord] = (),
    ) -> list[AddResult] | None:
        async with self._write():
            row = await self._fetchone(
                "SELECT reflection FROM turns WHERE id = ? AND user_key = ?", (turn_id, user_key)
            )
            if not still_reflecting(row[0] if row else None):
                # Only the usage, and the attempt on the user's turn (when there is one), so a
                # run again after this commit (its outcome lost) knows the usage is in.
                noted = attempts if row else None
                await self._on_thread(end_reflection, turn_id, None, noted, usage)
                return None
            results = []
            if memories:
                uid = cast(int, await self._uid(user_key, create=True))
                for w in memories:
                    results.append(
                        await self._add_superseding(uid, user_key, w.memory, dedupe, w.supersedes)
                    )
                await self._note_write(uid, [w.memory for w in memories], results)
            await self._on_thread(end_reflection, turn_id, "done", attempts, usage)
            return results

    async def _add_superseding(
        self, uid: int, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int]
    ) -> AddResult:
        """Inside a write: :meth:`add`'s rule for one memory (the seam's docstring)."""
        result = await self._add_one(uid, user_key, memory, dedupe, supersedes)
        done = [
            old_id
            for old_id in dict.fromkeys(supersedes)
            if await self._supersede(uid, old_id, result.id, memory.conversation_key)
        ]
        return replace(result, superseded=result.superseded + tuple(done))

    async def add_many(
        self, *, user_key: str, memories: Sequence[NewMemory], dedupe: Deduper | None
    ) -> list[AddResult]:
        """Write several memories in one transaction.

        With a ``dedupe``, each is checked against all before it. With ``None`` (bulk loads
        of trusted data) only exact duplicates are skipped, and rows go in by ``executemany``.
        """
        async with self._write():
            uid = cast(int, await self._uid(user_key, create=True))
            if dedupe is None:
                results = await self._bulk_add(uid, memories)
            else:
                results = [await self._add_one(uid, user_key, m, dedupe) for m in memories]
            await self._note_write(uid, memories, results)
            return results

    async def _bulk_add(self, uid: int, memories: Sequence[NewMemory]) -> list[AddResult]:
        row = await self._fetchone("SELECT COALESCE(MAX(id), 0) FROM memories")
        start = row[0] if row else 0
        now = utcnow()
        found = await self._fetchone("SELECT user_key FROM users WHERE uid = ?", (uid,))
        owner = str(found[0]) if found else ""
        rows = []
        for m in memories:
            terms = index_terms(uid, m.text)
            created = m.created_at or now
            rows.append(
                (
                    uid,
                    m.text,
                    normalize(m.text),
                    " ".join(terms),
                    len(terms),
                    m.kind,
                    m.category,
                    m.source,
                    m.origin,
                    m.conversation_key,
                    ts(created),
                    ts(m.updated_at or created),
                    *day_columns(m),
                    *stored_place(m.place, user_key=owner),
                )
            )
        await self._conn.executemany(
            "INSERT OR IGNORE INTO memories(uid, text, norm, terms, n_terms, kind, category,"
            " source, origin, conversation_key, created_at, updated_at, about, valid_from,"
            " valid_until, place, reach)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        await self._conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT uid, id, 'added', ? FROM memories WHERE uid = ? AND id > ?",
            (ts(now), uid, start),
        )
        ids = {
            r[1]: r[0]
            for r in await self._fetchall(
                "SELECT id, norm FROM memories WHERE uid = ? AND superseded_by IS NULL"
                " AND norm IN (SELECT value FROM json_each(?))",
                (uid, json.dumps([r[2] for r in rows])),
            )
        }
        fresh = {i for i in ids.values() if i > start}
        return bulk_results([r[2] for r in rows], ids, fresh)

    async def _add_one(
        self,
        uid: int,
        user_key: str,
        memory: NewMemory,
        dedupe: Deduper,
        supersedes: Sequence[int] = (),
    ) -> AddResult:
        norm = normalize(memory.text)
        known = await self._dedupe_candidates(uid, norm, memory.text)
        decision = decide(
            dedupe,
            text=memory.text,
            about=memory.about,
            place=memory.place,
            # Only memories about the same person (the same text always: one active copy).
            known=[
                c for c in known if same_person(c.about, memory.about) or normalize(c.text) == norm
            ],
            replacing=frozenset(supersedes),
        )
        if decision.duplicate_of is not None:
            if decision.widen is not None:
                twin = decision.duplicate_of.id
                await self._widen(uid, user_key, twin, decision.widen, memory.conversation_key)
            return AddResult(id=decision.duplicate_of.id, status="duplicate")
        terms = index_terms(uid, memory.text)
        created = memory.created_at or utcnow()
        updated = memory.updated_at or created
        cur = await self._conn.execute(
            "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
            " conversation_key, created_at, updated_at, about, valid_from, valid_until, place,"
            " reach) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                uid,
                memory.text,
                norm,
                " ".join(terms),
                len(terms),
                memory.kind,
                memory.category,
                memory.source,
                memory.origin,
                memory.conversation_key,
                ts(created),
                ts(updated),
                *day_columns(memory),
                *stored_place(memory.place, user_key=user_key),
            ),
        )
        memory_id = cast(int, cur.lastrowid)
        await self._event(uid, memory_id, "added", utcnow(), memory.conversation_key)
        # A more specific fact (or a new state) supersedes the general one it narrows.
        narrowed = [
            old.id
            for old in decision.supersedes
            if await self._supersede(uid, old.id, memory_id, memory.conversation_key)
        ]
        return AddResult(id=memory_id, status="added", superseded=tuple(narrowed))

    async def _dedupe_candidates(self, uid: int, norm: str, text: str) -> list[_Candidate]:
        """In one query: the active memory with the same normalised text, if any, then the
        ``DEDUPE_CANDIDATES`` best BM25 neighbours (FTS5's order is enough for Jaccard)."""
        terms = query_terms(uid, text)
        exact = (
            "SELECT id, text, about, place FROM memories WHERE uid = ? AND norm = ?"
            " AND superseded_by IS NULL"
        )
        if not terms:
            rows = await self._fetchall(exact, (uid, norm))
        else:
            match = " OR ".join(f'"{t}"' for t in terms)
            fts = fts_table(uid)
            rows = await self._fetchall(
                f"{exact} UNION ALL SELECT * FROM (SELECT m.id, m.text, m.about, m.place FROM ("
                f"  SELECT rowid AS id FROM {fts} WHERE {fts} MATCH ?"
                f"  ORDER BY bm25({fts}) LIMIT ?) f JOIN memories m ON m.id = f.id)",
                (uid, norm, match, DEDUPE_CANDIDATES),
            )
        return [_Candidate(r[0], r[1], r[2], parse_place(r[3])) for r in rows]

    async def _widen(
        self, uid: int, user_key: str, memory_id: int, place: Place, conversation_key: str | None
    ) -> None:
        """Inside a write: memory ``memory_id`` takes ``place``, where its owner said it again
        (:mod:`core.rules.reassert`); its FTS5 marker term follows (``terms`` in the SET fires
        the shard's reworded trigger), and a ``restored`` event moves the user's memory head
        (hybrid recall's cache of reaches)."""
        place_key, reach = stored_place(place, user_key=user_key)
        await self._conn.execute(
            "UPDATE memories SET place = ?, reach = ?, terms = terms"
            " WHERE id = ? AND uid = ? AND superseded_by IS NULL",
            (place_key, reach, memory_id, uid),
        )
        await self._event(uid, memory_id, "restored", utcnow(), conversation_key)

    async def _supersede(
        self, uid: int, old_id: int, new_id: int, conversation_key: str | None
    ) -> bool:
        if old_id == new_id:
            return False
        rows = await self._fetchall(
            "SELECT id FROM memories WHERE uid = ? AND id IN (?, ?)", (uid, old_id, new_id)
        )
        if len(rows) != 2:
            return False
        now = utcnow()
        cur = await self._conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ?"
            " WHERE id = ? AND uid = ? AND superseded_by IS NULL",
            (new_id, ts(now), old_id, uid),
        )
        if cur.rowcount != 1:
            return False
        await self._event(uid, old_id, "superseded", now, conversation_key, related_id=new_id)
        return True

    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        """Erase one memory: its row, embedding and index terms (the user's FTS5 index is
        rewritten, :meth:`_erase_index`), then the WAL is checkpointed and truncated, so no
        byte of its text stays in the database, ``-wal`` or ``-shm`` file."""
        async with self._write():
            uid = await self._uid(user_key)
            if uid is None:
                return False
            gone = await self._erase_ids(uid, [memory_id]) == 1
            if gone:
                await self._erase_index(uid)
        if gone:
            await self._truncate_wal()
        return gone

    async def forget_all(self, *, user_key: str) -> int:
        """Erase all the user's memories (superseded ones too) and conversation turns; returns
        how many active memories there were.

        Deleted in batches of ``FORGET_BATCH`` rows, each its own short transaction, so other
        users' writes interleave; the user's FTS5 index is rewritten once at the end and the
        WAL truncated (:meth:`forget`). Linear in the user's memories (indexed lookups only).
        """
        # The turns go first, and the uid is read in that same write: a reflection that
        # commits after it finds its turn gone and writes nothing, one that committed before
        # it left memories the batches below erase (``finish_reflection``).
        async with self._write():
            await self._erase_conversations(user_key)
            uid = await self._uid(user_key)
        count = 0
        if uid is not None:
            for active in (True, False):
                last = 0
                while True:
                    async with self._write():
                        rows = await self._fetchall(
                            "SELECT id FROM memories WHERE uid = ? AND id > ?"
                            f" AND superseded_by IS {'' if active else 'NOT '}NULL"
                            " ORDER BY id LIMIT ?",
                            (uid, last, FORGET_BATCH),
                        )
                        if not rows:
                            break
                        last = rows[-1][0]
                        deleted = await self._erase_ids(uid, [r[0] for r in rows])
                        count += deleted if active else 0
        async with self._write():
            await self._erase_conversations(user_key)  # an answer stored meanwhile
            if uid is not None:
                await self._erase_index(uid)
        await self._truncate_wal()
        return count

    async def _erase_conversations(self, user_key: str) -> None:
        """Delete the user's turns and the answers to them (inside the caller's write)."""
        await self._conn.execute(
            "DELETE FROM turns WHERE reply_to IN (SELECT id FROM turns WHERE user_key = ?)",
            (user_key,),
        )
        await self._conn.execute("DELETE FROM turns WHERE user_key = ?", (user_key,))
        await self._conn.execute("DELETE FROM pending_actions WHERE user_key = ?", (user_key,))

    # ---------------------------------------------------------------- reads
    async def get(self, *, user_key: str, memory_id: int) -> Memory | None:
        row = await self._fetchone(
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
    ) -> list[Memory]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        where = memory_filter(include_superseded=include_superseded, standing=standing, reach=reach)
        if where is None:
            return []
        rows = await self._fetchall(
            f"SELECT {_MEMORY_COLUMNS} FROM memories m JOIN users u ON u.uid = m.uid"
            f" WHERE m.uid = ?{where} ORDER BY m.id DESC LIMIT ? OFFSET ?",
            (uid, max(0, limit), max(0, offset)),
        )
        return [_memory(r) for r in rows]

    async def count(self, *, user_key: str) -> int:
        row = await self._fetchone("SELECT n_docs FROM users WHERE user_key = ?", (user_key,))
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
        where, params = "WHERE superseded_by IS NULL", ()
        if user_key is not None:
            uid = await self._uid(user_key)
            if uid is None:
                return MemoryStats(total=0)
            where, params = where + " AND uid = ?", (uid,)  # type: ignore[assignment]
        by_kind = {
            r[0]: r[1]
            for r in await self._fetchall(
                f"SELECT kind, COUNT(*) FROM memories {where} GROUP BY kind", params
            )
        }
        by_category = {
            r[0]: r[1]
            for r in await self._fetchall(
                f"SELECT category, COUNT(*) FROM memories {where} GROUP BY category", params
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

    # ---------------------------------------------------------------- pending actions
    async def put_pending(
        self,
        *,
        token: str,
        user_key: str,
        kind: str,
        payload: str,
        expires_at: datetime,
        replace: bool = False,
    ) -> None:
        async with self._write():
            await self._conn.execute(
                "DELETE FROM pending_actions WHERE expires_at <= ?", (ts(utcnow()),)
            )
            if replace:
                await self._conn.execute(
                    "DELETE FROM pending_actions WHERE user_key = ? AND kind = ?", (user_key, kind)
                )
            await self._conn.execute(
                "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (token, user_key, kind, payload, ts(expires_at)),
            )

    async def take_pending(
        self, *, token: str, user_key: str, kind: str, now: datetime
    ) -> str | None:
        async with self._write():
            rows = await self._fetchall(
                "DELETE FROM pending_actions WHERE token = ? AND user_key = ? AND kind = ?"
                " AND expires_at > ? RETURNING payload",
                (token, user_key, kind, ts(now)),
            )
        return str(rows[0][0]) if rows else None

    async def pending_owner(self, *, token: str, kind: str, now: datetime) -> str | None:
        row = await self._fetchone(
            "SELECT user_key FROM pending_actions WHERE token = ? AND kind = ? AND expires_at > ?",
            (token, kind, ts(now)),
        )
        return str(row[0]) if row else None

    async def drop_pending(self, *, token: str) -> None:
        async with self._write():
            await self._conn.execute("DELETE FROM pending_actions WHERE token = ?", (token,))
