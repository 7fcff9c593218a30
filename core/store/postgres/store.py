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

Across replicas: a write to a user's memories first locks the user's row, so concurrent
writes of one user are serialised and dedupe sees what another replica just stored; the
partial unique index on ``(uid, norm)`` over active memories is the last line (a violation is
reported as a duplicate of the stored memory). Forgetting deletes the row at once; as in any
PostgreSQL table the dead tuple stays on disk until (auto)vacuum and in WAL archives.

Connection, replicas and locks: :mod:`core.store.postgres.base`; turns, event claims, modes
and usage: :mod:`core.store.postgres.conversations`; cleanup changes:
:mod:`core.store.postgres.cleanup`; embeddings: :mod:`core.store.postgres.vectors`; schema:
:mod:`core.store.postgres.migrations`; moving a SQLite file in: :mod:`core.store.postgres.admin`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import asyncpg

from core.rules.about import same_person
from core.rules.dedupe import Deduper
from core.rules.places import stored_place
from core.rules.reassert import decide
from core.rules.text import index_terms, normalize
from core.store.postgres.channels import PostgresChannels
from core.store.postgres.cleanup import PostgresHygiene
from core.store.postgres.conversations import PostgresConversations, end_reflection
from core.store.postgres.recall import MEMORY_COLUMNS, memory_from_row, search_user
from core.store.postgres.uses import PostgresRecallLog
from core.store.postgres.vectors import PostgresVectors
from core.store.rows import memory_filter
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

_INSERT = (
    "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
    " conversation_key, created_at, updated_at, about, valid_from, valid_until, place, reach)"
)


class PostgresStore(
    PostgresChannels, PostgresHygiene, PostgresVectors, PostgresRecallLog, PostgresConversations
):
    """The PostgreSQL store (:class:`core.store.seams.Store`); open with ``await
    PostgresStore.open(url)``, close with ``close``."""

    async def _event(
        self,
        conn: asyncpg.Connection,
        uid: int,
        memory_id: int,
        event: str,
        at: datetime,
        conversation_key: str | None,
        related_id: int | None = None,
    ) -> None:
        await conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at, conversation_key, related_id)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            uid,
            memory_id,
            event,
            at,
            conversation_key,
            related_id,
        )

    # ---------------------------------------------------------------- writes
    async def add(
        self, *, user_key: str, memory: NewMemory, dedupe: Deduper, supersedes: Sequence[int] = ()
    ) -> AddResult:
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key, create=True)
            assert uid is not None
            result = await self._add_superseding(conn, uid, user_key, memory, dedupe, supersedes)
            await self._note_write(conn, uid, [memory], [result])
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
        async with self._tx() as conn:
            # The user's row first, then the turn's, as forget_all takes them (no deadlock);
            # the turn's lock holds a mode change (which turns it off) until the commit.
            uid = await self._lock_user(conn, user_key, create=bool(memories))
            state = await conn.fetchval(
                "SELECT reflection FROM turns WHERE id = $1 AND user_key = $2 FOR UPDATE",
                turn_id,
                user_key,
            )
            if not still_reflecting(state):
                # Only the usage, and the attempt on the user's turn (when there is one), so a
                # run again after this commit (its outcome lost) knows the usage is in.
                noted = attempts if state is not None else None
                await end_reflection(conn, turn_id, None, noted, usage)
                return None
            results = []
            if memories:
                assert uid is not None
                for w in memories:
                    results.append(
                        await self._add_superseding(
                            conn, uid, user_key, w.memory, dedupe, w.supersedes
                        )
                    )
                await self._note_write(conn, uid, [w.memory for w in memories], results)
            await end_reflection(conn, turn_id, "done", attempts, usage)
            return results

    async def _add_superseding(
        self,
        conn: asyncpg.Connection,
        uid: int,
        user_key: str,
        memory: NewMemory,
        dedupe: Deduper,
        supersedes: Sequence[int],
    ) -> AddResult:
        """Inside a write holding the user's row: :meth:`add`'s rule for one memory."""
        result = await self._add_one(conn, uid, user_key, memory, dedupe, supersedes)
        done = [
            old_id
            for old_id in dict.fromkeys(supersedes)
            if await self._supersede(conn, uid, old_id, result.id, memory.conversation_key)
        ]
        return replace(result, superseded=result.superseded + tuple(done))

    async def add_many(
        self, *, user_key: str, memories: Sequence[NewMemory], dedupe: Deduper | None
    ) -> list[AddResult]:
        """Write several memories in one transaction.

        With a ``dedupe``, each is checked against all before it. With ``None`` (bulk loads
        of trusted data) only exact duplicates are skipped, and rows go in by one statement.
        """
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key, create=True)
            assert uid is not None
            if dedupe is None:
                results = await self._bulk_add(conn, uid, memories)
            else:
                results = [await self._add_one(conn, uid, user_key, m, dedupe) for m in memories]
            await self._note_write(conn, uid, memories, results)
            return results

    async def _bulk_add(
        self, conn: asyncpg.Connection, uid: int, memories: Sequence[NewMemory]
    ) -> list[AddResult]:
        if not memories:
            return []
        now = utcnow()
        norms = [normalize(m.text) for m in memories]
        terms = [index_terms(uid, m.text) for m in memories]
        owner = await conn.fetchval("SELECT user_key FROM users WHERE uid = $1", uid)
        places = [stored_place(m.place, user_key=str(owner)) for m in memories]
        inserted = await conn.fetch(
            f"{_INSERT} SELECT $1, x.text, x.norm, x.terms, x.n_terms, x.kind, x.category,"
            " x.source, x.origin, x.ck, x.created, x.updated, x.about, x.vf, x.vu, x.place,"
            " x.reach FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::text[],"
            " $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[],"
            " $12::timestamptz[], $13::text[], $14::date[], $15::date[], $16::text[],"
            " $17::text[]) WITH ORDINALITY AS x(text, norm, terms, n_terms, kind, category,"
            " source, origin, ck, created, updated, about, vf, vu, place, reach, n)"
            " ORDER BY x.n ON CONFLICT DO NOTHING RETURNING id",
            uid,
            [m.text for m in memories],
            norms,
            [" ".join(t) for t in terms],
            [len(t) for t in terms],
            [m.kind for m in memories],
            [m.category for m in memories],
            [m.source for m in memories],
            [m.origin for m in memories],
            [m.conversation_key for m in memories],
            [m.created_at or now for m in memories],
            [m.updated_at or m.created_at or now for m in memories],
            [m.about for m in memories],
            [m.valid_from for m in memories],
            [m.valid_until for m in memories],
            *map(list, zip(*places, strict=True)),
        )
        new_ids = sorted(int(r[0]) for r in inserted)
        await conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT $1, x.id, 'added', $3 FROM unnest($2::bigint[]) AS x(id) ORDER BY x.id",
            uid,
            new_ids,
            now,
        )
        ids = {
            r[1]: int(r[0])
            for r in await conn.fetch(
                "SELECT id, norm FROM memories WHERE uid = $1 AND superseded_by IS NULL"
                " AND norm = ANY($2::text[])",
                uid,
                norms,
            )
        }
        return bulk_results(norms, ids, set(new_ids))

    async def _add_one(
        self,
        conn: asyncpg.Connection,
        uid: int,
        user_key: str,
        memory: NewMemory,
        dedupe: Deduper,
        supersedes: Sequence[int] = (),
    ) -> AddResult:
        norm = normalize(memory.text)
        twin_sql = "SELECT id FROM memories WHERE uid = $1 AND norm = $2 AND superseded_by IS NULL"
        exact = await conn.fetchrow(
            f"SELECT {MEMORY_COLUMNS} FROM memories m"
            " WHERE m.uid = $1 AND m.norm = $2 AND m.superseded_by IS NULL",
            uid,
            norm,
        )
        if exact is not None:
            known = [memory_from_row(exact, user_key)]  # the same text: one active copy
        else:
            neighbours = await self._search(
                conn, uid, user_key, memory.text, DEDUPE_CANDIDATES, None
            )
            # Only memories about the same person (core.rules.about.same_person).
            known = [s.memory for s in neighbours if same_person(s.memory.about, memory.about)]
        decision = decide(
            dedupe,
            text=memory.text,
            about=memory.about,
            place=memory.place,
            known=known,
            replacing=frozenset(supersedes),
        )
        if decision.duplicate_of is not None:
            if decision.widen is not None:
                twin, said_in = decision.duplicate_of.id, memory.conversation_key
                await self._widen(conn, uid, user_key, twin, decision.widen, said_in)
            return AddResult(id=decision.duplicate_of.id, status="duplicate")
        terms = index_terms(uid, memory.text)
        created = memory.created_at or utcnow()
        try:
            async with conn.transaction():  # a savepoint: a violation keeps the outer one
                memory_id = int(
                    await conn.fetchval(
                        f"{_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
                        " $13, $14, $15, $16, $17) RETURNING id",
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
                        created,
                        memory.updated_at or created,
                        memory.about,
                        memory.valid_from,
                        memory.valid_until,
                        *stored_place(memory.place, user_key=user_key),
                    )
                )
        except asyncpg.UniqueViolationError:
            existing = await conn.fetchval(twin_sql, uid, norm)
            logger.info("user=%s: identical memory stored concurrently as #%s", user_key, existing)
            return AddResult(id=int(existing), status="duplicate")
        await self._event(conn, uid, memory_id, "added", utcnow(), memory.conversation_key)
        # A more specific fact (or a new state) supersedes the general one it narrows.
        narrowed = [
            old.id
            for old in decision.supersedes
            if await self._supersede(conn, uid, old.id, memory_id, memory.conversation_key)
        ]
        return AddResult(id=memory_id, status="added", superseded=tuple(narrowed))

    async def _widen(
        self,
        conn: asyncpg.Connection,
        uid: int,
        user_key: str,
        memory_id: int,
        place: Place,
        conversation_key: str | None,
    ) -> None:
        """Inside a write holding the user's row: memory ``memory_id`` takes ``place``, where
        its owner said it again (:mod:`core.rules.reassert`); a ``restored`` event moves the
        user's memory head (hybrid recall's cache of reaches)."""
        place_key, reach = stored_place(place, user_key=user_key)
        await conn.execute(
            "UPDATE memories SET place = $1, reach = $2"
            " WHERE id = $3 AND uid = $4 AND superseded_by IS NULL",
            place_key,
            reach,
            memory_id,
            uid,
        )
        await self._event(conn, uid, memory_id, "restored", utcnow(), conversation_key)

    async def _supersede(
        self,
        conn: asyncpg.Connection,
        uid: int,
        old_id: int,
        new_id: int,
        conversation_key: str | None,
    ) -> bool:
        if old_id == new_id:
            return False
        owned = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE uid = $1 AND id = ANY($2::bigint[])",
            uid,
            [old_id, new_id],
        )
        if owned != 2:
            return False
        now = utcnow()
        status = await conn.execute(
            "UPDATE memories SET superseded_by = $1, superseded_at = $2"
            " WHERE id = $3 AND uid = $4 AND superseded_by IS NULL",
            new_id,
            now,
            old_id,
            uid,
        )
        if status != "UPDATE 1":
            return False
        await self._event(conn, uid, old_id, "superseded", now, conversation_key, new_id)
        return True

    async def forget(self, *, user_key: str, memory_id: int) -> bool:
        """Delete one memory (its embedding by cascade); events keep no text."""
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key)
            if uid is None:
                return False
            return await self._erase_ids(conn, uid, [memory_id]) == 1

    async def forget_all(self, *, user_key: str) -> int:
        """Delete all the user's memories (superseded ones too) and turns in one transaction
        of set-based statements (linear in the user's rows; other users' rows are not
        locked); returns how many active memories there were. Run again when the server breaks
        a deadlock with a turn finishing or a mode change (:meth:`_tx_retrying`)."""

        async def erase(conn: asyncpg.Connection) -> int:
            uid = await self._lock_user(conn, user_key)
            if uid is None:
                # No committed row: a first reflection of this user may be inserting it now.
                # Inserting it too waits for that one (its memories are then erased here,
                # ``finish_reflection`` takes the same row first); a row made here only for
                # that goes again at once, so a forget never leaves a user behind.
                made = await conn.fetchval(
                    "INSERT INTO users(user_key, created_at) VALUES ($1, now())"
                    " ON CONFLICT (user_key) DO NOTHING RETURNING uid",
                    user_key,
                )
                if made is not None:
                    await conn.execute("DELETE FROM users WHERE uid = $1", made)
                else:
                    uid = await self._lock_user(conn, user_key)
            count = 0
            if uid is not None:
                count = int(
                    await conn.fetchval(
                        "SELECT count(*) FROM memories WHERE uid = $1 AND superseded_by IS NULL",
                        uid,
                    )
                )
                await self._erase_user(conn, uid)
            await conn.execute(
                "DELETE FROM turns WHERE reply_to IN (SELECT id FROM turns WHERE user_key = $1)",
                user_key,
            )
            await conn.execute("DELETE FROM turns WHERE user_key = $1", user_key)
            await conn.execute("DELETE FROM pending_actions WHERE user_key = $1", user_key)
            return count

        return await self._tx_retrying(erase)

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
    ) -> list[Memory]:
        uid = await self._uid(user_key)
        if uid is None:
            return []
        where = memory_filter(include_superseded=include_superseded, standing=standing, reach=reach)
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

    async def count(self, *, user_key: str) -> int:
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
        where, params = "WHERE superseded_by IS NULL", []
        if user_key is not None:
            uid = await self._uid(user_key)
            if uid is None:
                return MemoryStats(total=0)
            where, params = where + " AND uid = $1", [uid]
        rows = await self._fetch(
            f"SELECT kind, category, count(*) FROM memories {where} GROUP BY kind, category",
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
                return await self._search(conn, uid, user_key, query, k, reach, pool)

    async def _search(
        self,
        conn: asyncpg.Connection,
        uid: int,
        user_key: str,
        query: str,
        k: int,
        reach: Sequence[str] | None,
        pool: int | None = None,
    ) -> list[ScoredMemory]:
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
        async with self._tx() as conn:
            await conn.execute("DELETE FROM pending_actions WHERE expires_at <= $1", utcnow())
            if replace:
                await conn.execute(
                    "DELETE FROM pending_actions WHERE user_key = $1 AND kind = $2", user_key, kind
                )
            await conn.execute(
                "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
                " VALUES ($1, $2, $3, $4, $5)",
                token,
                user_key,
                kind,
                payload,
                expires_at,
            )

    async def take_pending(
        self, *, token: str, user_key: str, kind: str, now: datetime
    ) -> str | None:
        payload = await self._fetchval(
            "DELETE FROM pending_actions WHERE token = $1 AND user_key = $2 AND kind = $3"
            " AND expires_at > $4 RETURNING payload",
            token,
            user_key,
            kind,
            now,
        )
        return None if payload is None else str(payload)

    async def pending_owner(self, *, token: str, kind: str, now: datetime) -> str | None:
        owner = await self._fetchval(
            "SELECT user_key FROM pending_actions WHERE token = $1 AND kind = $2"
            " AND expires_at > $3",
            token,
            kind,
            now,
        )
        return None if owner is None else str(owner)

    async def drop_pending(self, *, token: str) -> None:
        await self._execute("DELETE FROM pending_actions WHERE token = $1", token)
