"""One SQLite write transaction over users' memories: the SQL of the memory rules
(:class:`core.store.memories.MemoryTx`, the rules in :mod:`core.store.memories`) and of a
cleanup change (:class:`core.store.cleanup.ChangeSql`: the run of its statements, written
once in :class:`core.store.cleanup.StatementChangeTx`). Both run inside
:meth:`core.store.sqlite.base.SQLiteBase._write` (times as ISO text).

Erasure: a memory's row goes with its embedding, uses and channel entry (triggers), and
its FTS5 postings when the user's index is rewritten (:meth:`SQLiteTx.erased`); the WAL is
truncated after the commit (:meth:`core.store.sqlite.base.SQLiteBase._truncate_wal`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any, cast

from core.rules.places import parse_place
from core.rules.text import query_terms
from core.store.cleanup import StatementChangeTx
from core.store.memories import EVENT, SUPERSEDE, Candidate, Candidates, NewRow, supersede_params
from core.store.sqlite.base import SQLiteBase, day_columns, ts
from core.store.sqlite.channels import write_attribution
from core.store.sqlite.conversations import end_reflection
from core.store.sqlite.migrations import fts_table
from core.types import Attribution, ReflectionState, UsageRecord, utcnow

_CONFIRMED = (
    "INSERT INTO memory_uses(memory_id, uid, confirmations)"
    " SELECT value, ?, count(*) FROM json_each(?) WHERE true GROUP BY value"
    " ON CONFLICT(memory_id) DO UPDATE SET"
    " confirmations = confirmations + excluded.confirmations"
)
_INSERT = (
    "INSERT{} INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
    " conversation_key, created_at, updated_at, about, valid_from, valid_until, place, reach)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(uid: int, row: NewRow, now: datetime) -> tuple[object, ...]:
    memory = row.memory
    created = memory.created_at or now
    return (
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
        ts(created),
        ts(memory.updated_at or created),
        *day_columns(memory),
        row.place,
        row.reach,
    )


class SQLiteTx:
    """:class:`core.store.memories.MemoryTx` in SQLite: the store's write connection inside
    one :meth:`~core.store.sqlite.base.SQLiteBase._write`."""

    def __init__(self, store: SQLiteBase) -> None:
        self.store, self.conn = store, store._conn

    async def user(self, user_key: str, *, create: bool = False, wait: bool = False) -> int | None:
        # One writer: no other transaction can be making the row (``wait`` is moot).
        return await self.store._uid(user_key, create=create)

    async def dedupe_candidates(
        self, uid: int, *, norm: str | None, text: str, limit: int
    ) -> Candidates:
        # In one query: the twins, if any, then the best BM25 neighbours (FTS5's order is
        # enough for Jaccard).
        terms = query_terms(uid, text) if limit > 0 else []
        exact = (
            "SELECT * FROM (SELECT 1, id, text, about, place FROM memories WHERE uid = ?"
            " AND norm = ? AND superseded_by IS NULL ORDER BY id)"
        )
        if not terms:
            rows = [] if norm is None else await self.store._fetchall(exact, (uid, norm))
        else:
            match = " OR ".join(f'"{t}"' for t in terms)
            fts = fts_table(uid)
            rows = await self.store._fetchall(
                f"{exact} UNION ALL SELECT * FROM (SELECT 0, m.id, m.text, m.about, m.place FROM ("
                f"  SELECT rowid AS id FROM {fts} WHERE {fts} MATCH ?"
                f"  ORDER BY bm25({fts}) LIMIT ?) f JOIN memories m ON m.id = f.id)",
                (uid, norm, match, limit),
            )
        found = [Candidate(r[1], r[2], r[3], parse_place(r[4])) for r in rows]
        twins = [c for r, c in zip(rows, found, strict=True) if r[0]]
        if twins:
            return Candidates(twins)
        return Candidates((), found)

    async def widen(self, uid: int, memory_id: int, *, place: str, reach: str) -> None:
        # Naming ``terms`` fires the shard's reworded trigger: the FTS5 reach marker follows.
        await self.conn.execute(
            "UPDATE memories SET place = ?, reach = ?, terms = terms"
            " WHERE id = ? AND uid = ? AND superseded_by IS NULL",
            (place, reach, memory_id, uid),
        )

    async def insert(self, uid: int, row: NewRow, *, at: datetime) -> int | None:
        cur = await self.conn.execute(_INSERT.format(""), _row(uid, row, at))
        return cast(int, cur.lastrowid)

    async def insert_many(
        self, uid: int, rows: Sequence[NewRow]
    ) -> tuple[dict[tuple[str, str], int], set[int]]:
        found = await self.store._fetchone("SELECT COALESCE(MAX(id), 0) FROM memories")
        start = found[0] if found else 0
        now = utcnow()
        await self.conn.executemany(_INSERT.format(" OR IGNORE"), [_row(uid, r, now) for r in rows])
        await self.conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT uid, id, 'added', ? FROM memories WHERE uid = ? AND id > ?",
            (ts(now), uid, start),
        )
        ids = {
            (r[1], r[2]): r[0]
            for r in await self.store._fetchall(
                "SELECT id, norm, reach FROM memories WHERE uid = ? AND superseded_by IS NULL"
                " AND norm IN (SELECT value FROM json_each(?))",
                (uid, json.dumps([r.norm for r in rows])),
            )
        }
        return ids, {i for i in ids.values() if i > start}

    async def set_superseded(self, uid: int, *, old_id: int, new_id: int, at: datetime) -> bool:
        params = supersede_params(uid, old_id=old_id, new_id=new_id, at=ts(at))
        cur = await self.conn.execute(SUPERSEDE, params)
        return cur.rowcount == 1

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
        params = (uid, memory_id, event, ts(at), conversation_key, related_id)
        await self.conn.execute(EVENT, params)

    async def confirm(self, uid: int, memory_ids: Sequence[int]) -> None:
        await self.conn.execute(_CONFIRMED, (uid, json.dumps(list(memory_ids))))

    async def turn_state(
        self, *, turn_id: int, user_key: str
    ) -> tuple[bool, ReflectionState | None]:
        row = await self.store._fetchone(
            "SELECT reflection FROM turns WHERE id = ? AND user_key = ?", (turn_id, user_key)
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
        await self.store._on_thread(end_reflection, turn_id, state, attempts, usage)

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None:
        await write_attribution(self.conn, channel_key, entries)

    async def memory_ids(
        self, uid: int, *, active: bool, after: int, limit: int | None
    ) -> list[int]:
        rows = await self.store._fetchall(
            "SELECT id FROM memories WHERE uid = ? AND id > ?"
            f" AND superseded_by IS {'' if active else 'NOT '}NULL ORDER BY id LIMIT ?",
            (uid, after, -1 if limit is None else limit),
        )
        return [int(r[0]) for r in rows]

    async def copies(self, uid: int, memory_id: int) -> list[int]:
        rows = await self.store._fetchall(
            "SELECT c.id FROM memories m JOIN memories c ON c.uid = m.uid AND c.norm = m.norm"
            " WHERE m.id = ? AND m.uid = ? AND m.superseded_by IS NULL"
            " AND c.superseded_by IS NULL AND c.id != m.id ORDER BY c.id",
            (memory_id, uid),
        )
        return [int(r[0]) for r in rows]

    async def erase(self, uid: int, memory_ids: Sequence[int]) -> int:
        # Three set-based statements; embeddings, uses and channel entries go by trigger.
        if not memory_ids:
            return 0
        chosen = json.dumps(list(memory_ids))
        await self.conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT uid, id, 'forgotten', ? FROM memories"
            " WHERE uid = ? AND id IN (SELECT value FROM json_each(?))"
            " ORDER BY superseded_by IS NOT NULL, id",
            (ts(utcnow()), uid, chosen),
        )
        await self.conn.execute(
            "UPDATE memory_events SET related_id = NULL WHERE uid = ? AND related_id IS NOT NULL"
            " AND related_id IN (SELECT value FROM json_each(?))",
            (uid, chosen),
        )
        cur = await self.conn.execute(
            "DELETE FROM memories WHERE uid = ? AND id IN (SELECT value FROM json_each(?))",
            (uid, chosen),
        )
        return cur.rowcount

    async def erased(self, uid: int) -> None:
        await self.store._erase_index(uid)

    async def erase_conversations(self, user_key: str) -> None:
        await self.conn.execute(
            "DELETE FROM turns WHERE reply_to IN (SELECT id FROM turns WHERE user_key = ?)",
            (user_key,),
        )
        await self.conn.execute("DELETE FROM turns WHERE user_key = ?", (user_key,))
        await self.conn.execute("DELETE FROM pending_actions WHERE user_key = ?", (user_key,))

    async def retired_before(self, older_than: datetime) -> list[tuple[str, int]]:
        rows = await self.store._fetchall(
            "SELECT DISTINCT m.uid, u.user_key, m.id FROM memory_events e"
            " JOIN memories m ON m.id = e.memory_id JOIN users u ON u.uid = m.uid"
            " WHERE e.change_id IS NOT NULL AND e.event IN ('retired', 'superseded')"
            " AND m.superseded_by IS NOT NULL AND m.superseded_at < ? ORDER BY m.uid, m.id",
            (ts(older_than),),
        )
        return [(str(r[1]), int(r[2])) for r in rows]

    def changes(self, uid: int) -> StatementChangeTx:
        return StatementChangeTx(SQLiteChangeSql(self.store), uid)


class SQLiteChangeSql:
    """:class:`core.store.cleanup.ChangeSql` in SQLite: on the write connection, each
    ``datetime`` parameter as its ISO text, a ``date`` as ``YYYY-MM-DD``, an id list as JSON."""

    id_list = "(SELECT value FROM json_each(?))"

    def __init__(self, store: SQLiteBase) -> None:
        self.store = store

    async def run(self, sql: str, *params: object) -> int:
        cur = await self.store._conn.execute(sql, _stored(params))
        return cur.rowcount

    async def rows(self, sql: str, *params: object) -> Sequence[Sequence[Any]]:
        return await self.store._fetchall(sql, _stored(params))

    async def insert(self, sql: str, *params: object) -> int:
        cur = await self.store._conn.execute(sql, _stored(params))
        return cast(int, cur.lastrowid)


def _stored(params: Sequence[object]) -> tuple[object, ...]:
    return tuple(
        ts(p)
        if isinstance(p, datetime)
        else p.isoformat()
        if isinstance(p, date)
        else json.dumps(p)
        if isinstance(p, list)
        else p
        for p in params
    )
