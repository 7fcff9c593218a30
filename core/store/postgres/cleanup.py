"""Memory hygiene in PostgreSQL: the SQL of a cleanup change (:mod:`core.store.cleanup` holds
the rules: validation, dispatch, undo planning), and the purge after the undo window.

Both take the user's row lock first (:meth:`core.store.postgres.base.PostgresBase._lock_user`),
like every write to a user's memories; after ``UNDO_WINDOW`` (7 days) ``purge_retired``
deletes the retired and superseded rows and the change can no longer be undone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from core.rules.cleanup_ops import AppliedChange, ChangeOp, MergeOp, Whose
from core.rules.places import parse_place, reach_of
from core.store.cleanup import apply_ops, check_disjoint, no_such_user, undo
from core.store.postgres.base import PostgresBase
from core.types import Origin, Source, utcnow


class _Tx:
    """:class:`core.store.cleanup.ChangeTx` in PostgreSQL (times as ``timestamptz``)."""

    def __init__(self, conn: asyncpg.Connection, uid: int) -> None:
        self.conn, self.uid, self.now = conn, uid, utcnow()

    async def active(
        self, ids: Sequence[int]
    ) -> dict[int, tuple[Source, Origin, datetime, str | None]]:
        rows = await self.conn.fetch(
            "SELECT id, source, origin, created_at, place FROM memories"
            " WHERE uid = $1 AND superseded_by IS NULL AND id = ANY($2::bigint[])",
            self.uid,
            list(ids),
        )
        return {int(r[0]): (r[1], r[2], r[3], r[4]) for r in rows}

    async def retire(self, memory_id: int) -> None:
        await self.conn.execute(
            "UPDATE memories SET superseded_by = id, superseded_at = $1 WHERE id = $2 AND uid = $3",
            self.now,
            memory_id,
            self.uid,
        )

    async def supersede(self, *, old_id: int, new_id: int) -> None:
        await self.conn.execute(
            "UPDATE memories SET superseded_by = $1, superseded_at = $2 WHERE id = $3 AND uid = $4",
            new_id,
            self.now,
            old_id,
            self.uid,
        )

    async def has_active_norm(self, norm: str) -> bool:
        found = await self.conn.fetchval(
            "SELECT 1 FROM memories WHERE uid = $1 AND norm = $2 AND superseded_by IS NULL",
            self.uid,
            norm,
        )
        return found is not None

    async def insert_merged(
        self,
        *,
        op: MergeOp,
        norm: str,
        terms: Sequence[str],
        labels: tuple[Source, Origin, datetime, str],
    ) -> int:
        source, origin, created, place = labels
        return int(
            await self.conn.fetchval(
                "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source,"
                " origin, created_at, updated_at, place, reach) VALUES ($1, $2, $3, $4, $5, $6,"
                " $7, $8, $9, $10, $11, $12, $13) RETURNING id",
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
            )
        )

    async def whose(self, ids: Sequence[int]) -> list[Whose]:
        rows = await self.conn.fetch(
            "SELECT about, valid_from, valid_until FROM memories"
            " WHERE uid = $1 AND id = ANY($2::bigint[])",
            self.uid,
            list(ids),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    async def set_whose(self, *, memory_id: int, whose: Whose) -> None:
        about, first, last = whose
        await self.conn.execute(
            "UPDATE memories SET about = $1, valid_from = $2, valid_until = $3"
            " WHERE id = $4 AND uid = $5",
            about,
            first,
            last,
            memory_id,
            self.uid,
        )

    async def point_to(self, *, ids: Sequence[int], new_id: int) -> None:
        await self.conn.execute(
            "UPDATE memories SET superseded_by = $1 WHERE uid = $2 AND id = ANY($3::bigint[])",
            new_id,
            self.uid,
            list(ids),
        )

    async def log(
        self, *, memory_id: int, event: str, change_id: str, related: int | None = None
    ) -> None:
        await self.conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at, related_id, change_id)"
            " VALUES ($1, $2, $3, $4, $5, $6)",
            self.uid,
            memory_id,
            event,
            utcnow(),
            related,
            change_id,
        )

    async def change_events(self, change_id: str) -> list[tuple[int, str]]:
        rows = await self.conn.fetch(
            "SELECT memory_id, event FROM memory_events WHERE uid = $1 AND change_id = $2"
            " ORDER BY id DESC",
            self.uid,
            change_id,
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    async def has_events(self, change_id: str) -> bool:
        found = await self.conn.fetchval(
            "SELECT 1 FROM memory_events WHERE uid = $1 AND change_id = $2 LIMIT 1",
            self.uid,
            change_id,
        )
        return found is not None

    async def count_existing(self, ids: Sequence[int]) -> int:
        return int(
            await self.conn.fetchval(
                "SELECT count(*) FROM memories WHERE uid = $1 AND id = ANY($2::bigint[])",
                self.uid,
                list(ids),
            )
        )

    async def built_on(self, *, added: Sequence[int], change_id: str) -> bool:
        found = await self.conn.fetchval(
            "SELECT 1 FROM memories WHERE uid = $1 AND superseded_by = ANY($2::bigint[])"
            " AND id NOT IN (SELECT memory_id FROM memory_events WHERE change_id = $3) LIMIT 1",
            self.uid,
            list(added),
            change_id,
        )
        return found is not None

    async def delete(self, ids: Sequence[int]) -> None:
        await self.conn.execute(
            "DELETE FROM memories WHERE uid = $1 AND id = ANY($2::bigint[])", self.uid, list(ids)
        )

    async def reactivate(self, memory_id: int) -> bool:
        status = await self.conn.execute(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL"
            " WHERE id = $1 AND uid = $2 AND superseded_by IS NOT NULL",
            memory_id,
            self.uid,
        )
        return bool(status == "UPDATE 1")


class PostgresHygiene(PostgresBase):
    """``apply_change`` / ``undo_change`` / ``purge_retired`` / ``users_with_memories``."""

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetch(
            "SELECT user_key FROM users WHERE n_docs >= $1 ORDER BY uid", at_least
        )
        return [str(r[0]) for r in rows]

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply ``ops`` as one change (:func:`core.store.cleanup.apply_ops`). Every id must be
        an active memory of the user, and no memory may appear in two operations; else
        ``MemoryNotFound`` / ``StoreError`` and nothing changes."""
        seen = check_disjoint(ops)
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key)
            if uid is None:
                raise no_such_user(seen)
            return await apply_ops(_Tx(conn, uid), change_id=change_id, ops=ops, seen=seen)

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before ``change_id`` (:func:`core.store.cleanup.undo`);
        returns the memories restored. ``StoreError`` when it cannot be undone."""
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key)
            return await undo(_Tx(conn, uid) if uid is not None else None, change_id=change_id)

    async def purge_retired(self, *, older_than: datetime) -> int:
        """Delete memories a cleanup change retired or superseded before ``older_than`` (and
        still out of recall), one user per transaction, as ``forget`` does."""
        rows = await self._fetch(
            "SELECT DISTINCT m.uid, m.id FROM memory_events e JOIN memories m ON m.id = e.memory_id"
            " WHERE e.change_id IS NOT NULL AND e.event IN ('retired', 'superseded')"
            " AND m.superseded_by IS NOT NULL AND m.superseded_at < $1 ORDER BY m.uid, m.id",
            older_than,
        )
        by_user: dict[int, list[int]] = {}
        for uid, memory_id in rows:
            by_user.setdefault(int(uid), []).append(int(memory_id))
        erased = 0
        for uid, ids in by_user.items():
            async with self._tx() as conn:
                await conn.execute("SELECT 1 FROM users WHERE uid = $1 FOR UPDATE", uid)
                erased += await self._erase_ids(conn, uid, ids)
        return erased

    async def _erase_ids(self, conn: asyncpg.Connection, uid: int, ids: Sequence[int]) -> int:
        """Delete the user's memories ``ids`` (others' ids are ignored) in three set-based
        statements inside the caller's transaction; returns how many were deleted. Each gets
        a ``forgotten`` event (actives first, then superseded); events of other memories
        that pointed at them lose the pointer. Embeddings go by ``ON DELETE CASCADE``."""
        if not ids:
            return 0
        where = "uid = $1 AND id = ANY($2::bigint[])"
        await conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            f" SELECT uid, id, 'forgotten', $3 FROM memories WHERE {where}"
            " ORDER BY superseded_by IS NOT NULL, id",
            uid,
            list(ids),
            utcnow(),
        )
        await conn.execute(
            "UPDATE memory_events SET related_id = NULL"
            " WHERE uid = $1 AND related_id IS NOT NULL AND related_id = ANY($2::bigint[])",
            uid,
            list(ids),
        )
        status = await conn.execute(f"DELETE FROM memories WHERE {where}", uid, list(ids))
        return int(status.split()[-1])

    async def _erase_user(self, conn: asyncpg.Connection, uid: int) -> None:
        """Delete all memories of user ``uid`` as :meth:`_erase_ids` does, without id lists."""
        await conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at)"
            " SELECT uid, id, 'forgotten', $2 FROM memories WHERE uid = $1"
            " ORDER BY superseded_by IS NOT NULL, id",
            uid,
            utcnow(),
        )
        await conn.execute(
            "UPDATE memory_events SET related_id = NULL WHERE uid = $1 AND related_id IS NOT NULL",
            uid,
        )
        await conn.execute("DELETE FROM memories WHERE uid = $1", uid)
