"""One PostgreSQL write transaction over users' memories: the SQL of the memory rules
(:class:`core.store.memories.MemoryTx`, the rules in :mod:`core.store.memories`) and of a
cleanup change (:class:`core.store.cleanup.ChangeSql`: the run of its statements, written
once in :class:`core.store.cleanup.StatementChangeTx`), on one pooled connection inside
``conn.transaction()`` (times as ``timestamptz``).

Every write to a user's memories first locks the user's row (:meth:`PostgresTx.user`), so
one user's writes are serialised across replicas and dedupe sees what another replica just
stored; the partial unique index on ``(uid, norm, reach)`` over active memories is the last line
(:meth:`PostgresTx.insert` returns None). Forgetting deletes the row at once; as in any
PostgreSQL table the dead tuple stays on disk until (auto)vacuum and in WAL archives.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from core.rules.places import parse_place
from core.store.cleanup import StatementChangeTx
from core.store.memories import EVENT, SUPERSEDE, Candidate, Candidates, NewRow, supersede_params
from core.store.postgres.base import PostgresBase
from core.store.postgres.channels import write_attribution
from core.store.postgres.conversations import end_reflection
from core.store.postgres.migrations import numbered
from core.store.postgres.recall import search_user
from core.types import Attribution, ReflectionState, UsageRecord, utcnow

_SUPERSEDE, _EVENT = numbered(SUPERSEDE), numbered(EVENT)
_INSERT = (
    "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
    " conversation_key, created_at, updated_at, about, valid_from, valid_until, place, reach)"
)
_TWINS = (
    "SELECT id, text, about, place FROM memories"
    " WHERE uid = $1 AND norm = $2 AND superseded_by IS NULL ORDER BY id"
)
_CONFIRMED = (
    "INSERT INTO memory_uses(memory_id, uid, confirmations)"
    " SELECT x, $1, count(*) FROM unnest($2::bigint[]) AS x GROUP BY x ORDER BY x"
    " ON CONFLICT (memory_id) DO UPDATE SET"
    " confirmations = memory_uses.confirmations + excluded.confirmations"
)


class PostgresTx:
    """:class:`core.store.memories.MemoryTx` in PostgreSQL, on ``conn`` inside a
    transaction of ``store``."""

    def __init__(self, store: PostgresBase, conn: asyncpg.Connection) -> None:
        self.store, self.conn = store, conn
        self._keys: dict[int, str] = {}

    async def user(self, user_key: str, *, create: bool = False, wait: bool = False) -> int | None:
        uid = await self.store._lock_user(self.conn, user_key, create=create)
        if uid is not None:
            self._keys[uid] = user_key
        if uid is not None or not wait:
            return uid
        # No committed row: a first reflection of this user may be inserting it now.
        # Inserting it too waits for that one (``finish_reflection`` takes the same row
        # first); a row made here only for that goes again at once, so a forget never
        # leaves a user behind.
        made = await self.conn.fetchval(
            "INSERT INTO users(user_key, created_at) VALUES ($1, now())"
            " ON CONFLICT (user_key) DO NOTHING RETURNING uid",
            user_key,
        )
        if made is not None:
            await self.conn.execute("DELETE FROM users WHERE uid = $1", made)
            return None
        uid = await self.store._lock_user(self.conn, user_key)
        if uid is not None:
            self._keys[uid] = user_key
        return uid

    async def dedupe_candidates(
        self, uid: int, *, norm: str | None, text: str, limit: int
    ) -> Candidates:
        rows = [] if norm is None else await self.conn.fetch(_TWINS, uid, norm)
        if rows or limit <= 0:
            return Candidates([Candidate(int(r[0]), r[1], r[2], parse_place(r[3])) for r in rows])
        near = await search_user(self.conn, uid, self._keys[uid], text, limit, None)
        return Candidates(
            (),
            [Candidate(s.memory.id, s.memory.text, s.memory.about, s.memory.place) for s in near],
        )

    async def widen(self, uid: int, memory_id: int, *, place: str, reach: str) -> None:
        await self.conn.execute(
            "UPDATE memories SET place = $1, reach = $2"
            " WHERE id = $3 AND uid = $4 AND superseded_by IS NULL",
            place,
            reach,
            memory_id,
            uid,
        )

    async def insert(self, uid: int, row: NewRow, *, at: datetime) -> int | None:
        memory = row.memory
        created = memory.created_at or utcnow()
        try:
            async with self.conn.transaction():  # a savepoint: a violation keeps the outer one
                memory_id = int(
                    await self.conn.fetchval(
                        f"{_INSERT} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
                        " $13, $14, $15, $16, $17) RETURNING id",
                        uid,
                        memory.text,
                        row.norm,
                        " ".join(row.terms),
                        len(row.terms),
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
                        row.place,
                        row.reach,
                    )
                )
        except asyncpg.UniqueViolationError:
            return None
        return memory_id

    async def insert_many(
        self, uid: int, rows: Sequence[NewRow]
    ) -> tuple[dict[tuple[str, str], int], set[int]]:
        memories = [r.memory for r in rows]
        norms = [r.norm for r in rows]
        now = utcnow()
        inserted = await self.conn.fetch(
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
            [" ".join(r.terms) for r in rows],
            [len(r.terms) for r in rows],
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
            [r.place for r in rows],
            [r.reach for r in rows],
        )
        new_ids = sorted(int(r[0]) for r in inserted)
        await self.conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT $1, x.id, 'added', $3 FROM unnest($2::bigint[]) AS x(id) ORDER BY x.id",
            uid,
            new_ids,
            now,
        )
        active = await self.conn.fetch(
            "SELECT id, norm, reach FROM memories WHERE uid = $1 AND superseded_by IS NULL"
            " AND norm = ANY($2::text[])",
            uid,
            norms,
        )
        return {(r[1], r[2]): int(r[0]) for r in active}, set(new_ids)

    async def set_superseded(self, uid: int, *, old_id: int, new_id: int, at: datetime) -> bool:
        params = supersede_params(uid, old_id=old_id, new_id=new_id, at=at)
        status: str = await self.conn.execute(_SUPERSEDE, *params)
        return status == "UPDATE 1"

    async def event(
        self,
        uid: int,
        memory_id: int,
        event: str,
        *,
        at: datetime,
        conversation_key: str | None,
        related_id: int | None = None,
    ) -> None:
        await self.conn.execute(_EVENT, uid, memory_id, event, at, conversation_key, related_id)

    async def confirm(self, uid: int, memory_ids: Sequence[int]) -> None:
        # Row locks in memory id order, as the turn's recall upsert takes them (no deadlock).
        await self.conn.execute(_CONFIRMED, uid, list(memory_ids))

    async def turn_state(
        self, *, turn_id: int, user_key: str
    ) -> tuple[bool, ReflectionState | None]:
        row = await self.conn.fetchrow(
            "SELECT reflection FROM turns WHERE id = $1 AND user_key = $2 FOR UPDATE",
            turn_id,
            user_key,
        )
        return row is not None, None if row is None else row[0]

    async def end_reflection(
        self,
        *,
        turn_id: int,
        state: ReflectionState | None,
        attempts: int | None,
        usage: Sequence[UsageRecord],
    ) -> None:
        await end_reflection(self.conn, turn_id, state, attempts, usage)

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        await write_attribution(self.conn, channel_key, entries)

    async def memory_ids(
        self, uid: int, *, active: bool, after: int, limit: int | None
    ) -> list[int]:
        rows = await self.conn.fetch(
            "SELECT id FROM memories WHERE uid = $1 AND id > $2"
            f" AND superseded_by IS {'' if active else 'NOT '}NULL ORDER BY id LIMIT $3",
            uid,
            after,
            limit,
        )
        return [int(r[0]) for r in rows]

    async def copies(self, uid: int, memory_id: int) -> list[int]:
        rows = await self.conn.fetch(
            "SELECT c.id FROM memories m JOIN memories c ON c.uid = m.uid AND c.norm = m.norm"
            " WHERE m.id = $1 AND m.uid = $2 AND m.superseded_by IS NULL"
            " AND c.superseded_by IS NULL AND c.id <> m.id ORDER BY c.id",
            memory_id,
            uid,
        )
        return [int(r[0]) for r in rows]

    async def erase(self, uid: int, memory_ids: Sequence[int]) -> int:
        # Three set-based statements; embeddings, uses and channel entries go by cascade.
        if not memory_ids:
            return 0
        where = "uid = $1 AND id = ANY($2::bigint[])"
        await self.conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            f" SELECT uid, id, 'forgotten', $3 FROM memories WHERE {where}"
            " ORDER BY superseded_by IS NOT NULL, id",
            uid,
            list(memory_ids),
            utcnow(),
        )
        await self.conn.execute(
            "UPDATE memory_events SET related_id = NULL"
            " WHERE uid = $1 AND related_id IS NOT NULL AND related_id = ANY($2::bigint[])",
            uid,
            list(memory_ids),
        )
        status = await self.conn.execute(
            f"DELETE FROM memories WHERE {where}", uid, list(memory_ids)
        )
        return int(status.split()[-1])

    async def erased(self, uid: int) -> None:
        return None  # the index entries went with the rows

    async def erase_conversations(self, user_key: str) -> None:
        await self.conn.execute(
            "DELETE FROM turns WHERE reply_to IN (SELECT id FROM turns WHERE user_key = $1)",
            user_key,
        )
        await self.conn.execute("DELETE FROM turns WHERE user_key = $1", user_key)
        await self.conn.execute("DELETE FROM pending_actions WHERE user_key = $1", user_key)

    async def retired_before(self, older_than: datetime) -> list[tuple[str, int]]:
        rows = await self.conn.fetch(
            "SELECT DISTINCT m.uid, u.user_key, m.id FROM memory_events e"
            " JOIN memories m ON m.id = e.memory_id JOIN users u ON u.uid = m.uid"
            " WHERE e.change_id IS NOT NULL AND e.event IN ('retired', 'superseded')"
            " AND m.superseded_by IS NOT NULL AND m.superseded_at < $1 ORDER BY m.uid, m.id",
            older_than,
        )
        return [(str(r[1]), int(r[2])) for r in rows]

    def changes(self, uid: int) -> StatementChangeTx:
        return StatementChangeTx(PostgresChangeSql(self.conn), uid)


class PostgresChangeSql:
    """:class:`core.store.cleanup.ChangeSql` in PostgreSQL: on the transaction's connection,
    the placeholders numbered, an id list as ``bigint[]``."""

    id_list = "(SELECT unnest(?::bigint[]))"

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def run(self, sql: str, *params: object) -> int:
        # A command tag ("UPDATE 3") ends with the rows it changed.
        return int(str(await self.conn.execute(numbered(sql), *params)).split()[-1])

    async def rows(self, sql: str, *params: object) -> Sequence[Sequence[Any]]:
        return list(await self.conn.fetch(numbered(sql), *params))

    async def insert(self, sql: str, *params: object) -> int:
        return int(await self.conn.fetchval(numbered(sql) + " RETURNING id", *params))
