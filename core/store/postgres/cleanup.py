"""Memory hygiene in PostgreSQL: apply a cleanup plan as one change, and undo it exactly.

The same semantics as :mod:`core.store.sqlite.cleanup` (read its docstring): merge, supersede and
retire operations in one transaction, every event tagged with the change id; ``undo_change``
restores the exact previous rows; after ``UNDO_WINDOW`` (7 days) ``purge_retired`` deletes
the retired and superseded rows and the change can no longer be undone. Both take the user's
row lock first (:meth:`core.store.postgres.base.PostgresBase._lock_user`), like every write to a
user's memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from core.errors import MemoryNotFound, StoreError
from core.rules.cleanup_ops import (
    PAST_UNDO_WINDOW,
    AppliedChange,
    ChangeOp,
    MergeOp,
    RetireOp,
    SupersedeOp,
    merged_labels,
)
from core.rules.text import index_terms, normalize
from core.store.postgres.base import PostgresBase
from core.types import utcnow


async def _log(
    conn: asyncpg.Connection,
    uid: int,
    memory_id: int,
    event: str,
    change_id: str,
    related: int | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO memory_events(uid, memory_id, event, at, related_id, change_id)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        uid,
        memory_id,
        event,
        utcnow(),
        related,
        change_id,
    )


def _op_ids(op: ChangeOp) -> tuple[int, ...]:
    if isinstance(op, MergeOp):
        return op.ids
    return (op.old_id,) if isinstance(op, SupersedeOp) else (op.memory_id,)


class PostgresHygiene(PostgresBase):
    """``apply_change`` / ``undo_change`` / ``users_with_memories`` of the memory store."""

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetch(
            "SELECT user_key FROM users WHERE n_docs >= $1 ORDER BY uid", at_least
        )
        return [str(r[0]) for r in rows]

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply ``ops`` as one change. Every id must be an active memory of the user, and no
        memory may appear in two operations; else ``MemoryNotFound`` / ``StoreError`` and
        nothing changes."""
        seen: set[int] = set()
        for op in ops:
            ids = _op_ids(op)
            if seen & set(ids):
                raise StoreError("a memory appears in two operations of one change")
            seen.update(ids)
        added: list[int] = []
        superseded: list[int] = []
        retired: list[int] = []
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key)
            if uid is None:
                raise MemoryNotFound(next(iter(seen), 0))
            wanted = set(seen) | {op.new_id for op in ops if isinstance(op, SupersedeOp)}
            found = {
                int(r[0]): (r[1], r[2], r[3])
                for r in await conn.fetch(
                    "SELECT id, source, origin, created_at FROM memories"
                    " WHERE uid = $1 AND superseded_by IS NULL AND id = ANY($2::bigint[])",
                    uid,
                    sorted(wanted),
                )
            }
            missing = wanted - set(found)
            if missing:
                raise MemoryNotFound(min(missing))
            now = utcnow()
            for op in ops:
                if isinstance(op, RetireOp):
                    await self._retire(conn, uid, op.memory_id, now)
                    await _log(conn, uid, op.memory_id, "retired", change_id)
                    retired.append(op.memory_id)
                elif isinstance(op, SupersedeOp):
                    await conn.execute(
                        "UPDATE memories SET superseded_by = $1, superseded_at = $2 WHERE id = $3",
                        op.new_id,
                        now,
                        op.old_id,
                    )
                    await _log(conn, uid, op.old_id, "superseded", change_id, op.new_id)
                    superseded.append(op.old_id)
                else:
                    new_id = await self._merge(conn, uid, op, found, now)
                    await _log(conn, uid, new_id, "added", change_id)
                    added.append(new_id)
                    for old in op.ids:
                        await _log(conn, uid, old, "superseded", change_id, new_id)
                        superseded.append(old)
        return AppliedChange(change_id, tuple(added), tuple(superseded), tuple(retired))

    async def _retire(
        self, conn: asyncpg.Connection, uid: int, memory_id: int, now: datetime
    ) -> None:
        await conn.execute(
            "UPDATE memories SET superseded_by = id, superseded_at = $1 WHERE id = $2 AND uid = $3",
            now,
            memory_id,
            uid,
        )

    async def _merge(
        self,
        conn: asyncpg.Connection,
        uid: int,
        op: MergeOp,
        found: dict[int, tuple[str, str, datetime]],
        now: datetime,
    ) -> int:
        source, origin, created = merged_labels(found[i][:3] for i in op.ids)
        # Out of recall first (frees the normalised text if the new sentence equals one).
        for old in op.ids:
            await self._retire(conn, uid, old, now)
        norm = normalize(op.text)
        twin = await conn.fetchval(
            "SELECT id FROM memories WHERE uid = $1 AND norm = $2 AND superseded_by IS NULL",
            uid,
            norm,
        )
        if twin is not None:
            raise StoreError("the merged sentence duplicates another memory")
        terms = index_terms(uid, op.text)
        new_id = int(
            await conn.fetchval(
                "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source,"
                " origin, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,"
                " $10, $11) RETURNING id",
                uid,
                op.text,
                norm,
                " ".join(terms),
                len(terms),
                op.kind,
                op.category,
                source,
                origin,
                created,
                now,
            )
        )
        await conn.execute(
            "UPDATE memories SET superseded_by = $1 WHERE id = ANY($2::bigint[])",
            new_id,
            list(op.ids),
        )
        return new_id

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before ``change_id``; returns the memories restored.

        Raises ``StoreError`` when the change is unknown for this user, already undone, or a
        later change built on it (undo that one first).
        """
        async with self._tx() as conn:
            uid = await self._lock_user(conn, user_key)
            rows = (
                await conn.fetch(
                    "SELECT memory_id, event FROM memory_events WHERE uid = $1 AND change_id = $2"
                    " ORDER BY id DESC",
                    uid,
                    change_id,
                )
                if uid is not None
                else []
            )
            if uid is None or not rows:
                raise StoreError(f"no change {change_id!r} for this user")
            undone = await conn.fetchval(
                "SELECT 1 FROM memory_events WHERE uid = $1 AND change_id = $2 LIMIT 1",
                uid,
                f"undo:{change_id}",
            )
            if undone is not None:
                raise StoreError(f"change {change_id!r} was already undone")
            before = sorted({int(r[0]) for r in rows if r[1] != "added"})
            kept = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE uid = $1 AND id = ANY($2::bigint[])",
                uid,
                before,
            )
            if kept < len(before):
                raise StoreError(f"change {change_id!r} {PAST_UNDO_WINDOW}")
            added = sorted({int(r[0]) for r in rows if r[1] == "added"})
            if added:
                later = await conn.fetchval(
                    "SELECT 1 FROM memories WHERE uid = $1 AND superseded_by = ANY($2::bigint[])"
                    " AND id NOT IN (SELECT memory_id FROM memory_events WHERE change_id = $3)"
                    " LIMIT 1",
                    uid,
                    added,
                    change_id,
                )
                if later is not None:
                    raise StoreError(f"a later change builds on {change_id!r}; undo it first")
                # Merged-in memories go first, so a restored one can take back its sentence.
                await conn.execute(
                    "DELETE FROM memories WHERE uid = $1 AND id = ANY($2::bigint[])", uid, added
                )
            restored = 0
            for memory_id, event in rows:
                if event == "added":
                    continue
                status = await conn.execute(
                    "UPDATE memories SET superseded_by = NULL, superseded_at = NULL"
                    " WHERE id = $1 AND uid = $2 AND superseded_by IS NOT NULL",
                    memory_id,
                    uid,
                )
                if status == "UPDATE 1":
                    restored += 1
                    await _log(conn, uid, memory_id, "restored", f"undo:{change_id}")
            return restored

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
