"""Memory hygiene in SQLite: the SQL of a cleanup change (:mod:`core.store.cleanup` holds the
rules: validation, dispatch, undo planning), and the purge after the undo window.

Undo window: retired and superseded memories keep their text for ``UNDO_WINDOW`` (7 days,
:mod:`core.rules.cleanup_ops`); then ``purge_retired`` erases them as ``forget`` does (row,
embedding, FTS5 postings, WAL) and the change can no longer be undone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import cast

from core.rules.cleanup_ops import AppliedChange, ChangeOp, MergeOp, Whose
from core.rules.places import parse_place, reach_of
from core.store.cleanup import apply_ops, check_disjoint, no_such_user, undo
from core.store.sqlite.base import SQLiteBase, day, ts
from core.types import Origin, Source, utcnow


class _Tx:
    """:class:`core.store.cleanup.ChangeTx` in SQLite (times as ISO text)."""

    def __init__(self, store: SQLiteBase, uid: int) -> None:
        self.store, self.uid, self.now = store, uid, ts(utcnow())

    async def active(self, ids: Sequence[int]) -> dict[int, tuple[Source, Origin, str, str | None]]:
        rows = await self.store._fetchall(
            "SELECT id, source, origin, created_at, place FROM memories"
            " WHERE uid = ? AND superseded_by IS NULL"
            " AND id IN (SELECT value FROM json_each(?))",
            (self.uid, json.dumps(list(ids))),
        )
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    async def retire(self, memory_id: int) -> None:
        await self.store._conn.execute(
            "UPDATE memories SET superseded_by = id, superseded_at = ? WHERE id = ? AND uid = ?",
            (self.now, memory_id, self.uid),
        )

    async def supersede(self, *, old_id: int, new_id: int) -> None:
        await self.store._conn.execute(
            "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ? AND uid = ?",
            (new_id, self.now, old_id, self.uid),
        )

    async def has_active_norm(self, norm: str) -> bool:
        row = await self.store._fetchone(
            "SELECT 1 FROM memories WHERE uid = ? AND norm = ? AND superseded_by IS NULL",
            (self.uid, norm),
        )
        return row is not None

    async def insert_merged(
        self,
        *,
        op: MergeOp,
        norm: str,
        terms: Sequence[str],
        labels: tuple[Source, Origin, str, str],
    ) -> int:
        source, origin, created, place = labels
        cur = await self.store._conn.execute(
            "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
            " created_at, updated_at, place, reach) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.uid,
                op.text,
                norm,
                " ".join(terms),
                len(terms),
                op.kind,
                op.category,
                source,
                origin,
                created,
                self.now,
                place,
                reach_of(parse_place(place)),
            ),
        )
        return cast(int, cur.lastrowid)

    async def whose(self, ids: Sequence[int]) -> list[Whose]:
        rows = await self.store._fetchall(
            "SELECT about, valid_from, valid_until FROM memories"
            " WHERE uid = ? AND id IN (SELECT value FROM json_each(?))",
            (self.uid, json.dumps(list(ids))),
        )
        return [(r[0], day(r[1]), day(r[2])) for r in rows]

    async def set_whose(self, *, memory_id: int, whose: Whose) -> None:
        about, first, last = whose
        await self.store._conn.execute(
            "UPDATE memories SET about = ?, valid_from = ?, valid_until = ?"
            " WHERE id = ? AND uid = ?",
            (
                about,
                None if first is None else first.isoformat(),
                None if last is None else last.isoformat(),
                memory_id,
                self.uid,
            ),
        )

    async def point_to(self, *, ids: Sequence[int], new_id: int) -> None:
        await self.store._conn.execute(
            "UPDATE memories SET superseded_by = ? WHERE uid = ?"
            " AND id IN (SELECT value FROM json_each(?))",
            (new_id, self.uid, json.dumps(list(ids))),
        )

    async def log(
        self, *, memory_id: int, event: str, change_id: str, related: int | None = None
    ) -> None:
        await self.store._conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at, related_id, change_id)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (self.uid, memory_id, event, ts(utcnow()), related, change_id),
        )

    async def change_events(self, change_id: str) -> list[tuple[int, str]]:
        rows = await self.store._fetchall(
            "SELECT memory_id, event FROM memory_events WHERE uid = ? AND change_id = ?"
            " ORDER BY id DESC",
            (self.uid, change_id),
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    async def has_events(self, change_id: str) -> bool:
        row = await self.store._fetchone(
            "SELECT 1 FROM memory_events WHERE uid = ? AND change_id = ? LIMIT 1",
            (self.uid, change_id),
        )
        return row is not None

    async def count_existing(self, ids: Sequence[int]) -> int:
        row = await self.store._fetchone(
            "SELECT count(*) FROM memories WHERE uid = ?"
            " AND id IN (SELECT value FROM json_each(?))",
            (self.uid, json.dumps(list(ids))),
        )
        return int(row[0]) if row else 0

    async def built_on(self, *, added: Sequence[int], change_id: str) -> bool:
        row = await self.store._fetchone(
            "SELECT 1 FROM memories WHERE uid = ?"
            " AND superseded_by IN (SELECT value FROM json_each(?))"
            " AND id NOT IN (SELECT memory_id FROM memory_events WHERE change_id = ?) LIMIT 1",
            (self.uid, json.dumps(list(added)), change_id),
        )
        return row is not None

    async def delete(self, ids: Sequence[int]) -> None:
        await self.store._conn.execute(
            "DELETE FROM memories WHERE uid = ? AND id IN (SELECT value FROM json_each(?))",
            (self.uid, json.dumps(list(ids))),
        )

    async def reactivate(self, memory_id: int) -> bool:
        cur = await self.store._conn.execute(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL"
            " WHERE id = ? AND uid = ? AND superseded_by IS NOT NULL",
            (memory_id, self.uid),
        )
        return cur.rowcount > 0


class SQLiteHygiene(SQLiteBase):
    """``apply_change`` / ``undo_change`` / ``purge_retired`` of the memory store."""

    async def _user_id(self, user_key: str) -> int | None:
        row = await self._fetchone("SELECT uid FROM users WHERE user_key = ?", (user_key,))
        return int(row[0]) if row else None

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetchall(
            "SELECT user_key FROM users WHERE n_docs >= ? ORDER BY uid", (at_least,)
        )
        return [r[0] for r in rows]

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply ``ops`` as one change (:func:`core.store.cleanup.apply_ops`). Every id must be
        an active memory of the user, and no memory may appear in two operations; else
        ``MemoryNotFound`` / ``StoreError`` and nothing changes."""
        seen = check_disjoint(ops)
        async with self._write():
            uid = await self._user_id(user_key)
            if uid is None:
                raise no_such_user(seen)
            return await apply_ops(_Tx(self, uid), change_id=change_id, ops=ops, seen=seen)

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before ``change_id`` (:func:`core.store.cleanup.undo`);
        returns the memories restored. ``StoreError`` when it cannot be undone."""
        async with self._write():
            uid = await self._user_id(user_key)
            return await undo(_Tx(self, uid) if uid is not None else None, change_id=change_id)

    async def purge_retired(self, *, older_than: datetime) -> int:
        """Erase memories a cleanup change retired or superseded before ``older_than`` (and
        still out of recall), one user per transaction; see the module docstring."""
        rows = await self._fetchall(
            "SELECT DISTINCT m.uid, m.id FROM memory_events e JOIN memories m ON m.id = e.memory_id"
            " WHERE e.change_id IS NOT NULL AND e.event IN ('retired', 'superseded')"
            " AND m.superseded_by IS NOT NULL AND m.superseded_at < ? ORDER BY m.uid, m.id",
            (ts(older_than),),
        )
        by_user: dict[int, list[int]] = {}
        for uid, memory_id in rows:
            by_user.setdefault(uid, []).append(memory_id)
        erased = 0
        for uid, ids in by_user.items():
            async with self._write():
                erased += await self._erase_ids(uid, ids)
                await self._erase_index(uid)
        if erased:
            await self._truncate_wal()
        return erased

    async def _erase_ids(self, uid: int, ids: Sequence[int]) -> int:
        """Delete the user's memories ``ids`` (others' ids are ignored) in three set-based
        statements inside the caller's write; returns how many were deleted. Each gets a
        ``forgotten`` event (actives first, then superseded); events of other memories that
        pointed at them lose the pointer (their own state stays). Embeddings go by trigger."""
        if not ids:
            return 0
        chosen = json.dumps(list(ids))
        await self._conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT uid, id, 'forgotten', ? FROM memories"
            " WHERE uid = ? AND id IN (SELECT value FROM json_each(?))"
            " ORDER BY superseded_by IS NOT NULL, id",
            (ts(utcnow()), uid, chosen),
        )
        await self._conn.execute(
            "UPDATE memory_events SET related_id = NULL WHERE uid = ? AND related_id IS NOT NULL"
            " AND related_id IN (SELECT value FROM json_each(?))",
            (uid, chosen),
        )
        cur = await self._conn.execute(
            "DELETE FROM memories WHERE uid = ? AND id IN (SELECT value FROM json_each(?))",
            (uid, chosen),
        )
        return cur.rowcount
