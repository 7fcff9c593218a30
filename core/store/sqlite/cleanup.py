"""Memory hygiene in SQLite: apply a cleanup plan as one change, and undo it exactly.

A change is a set of operations applied in one transaction, every resulting event tagged with
the change id:

- merge: a new memory (the better sentence) is added and the merged ones are superseded by it;
- supersede: an older memory is superseded by a newer one;
- retire: a memory leaves recall with nothing replacing it (marked superseded by itself).

``undo_change`` restores the exact previous rows: merged-in memories are deleted, superseded
and retired ones become active again with their original columns (``updated_at`` included);
``restored`` events (change id ``undo:<id>``) record it.

Undo window: retired and superseded memories keep their text for ``UNDO_WINDOW`` (7 days,
:mod:`core.rules.cleanup_ops`); then ``purge_retired`` erases them as ``forget`` does (row,
embedding, FTS5 postings, WAL) and the change can no longer be undone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, cast

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
from core.store.sqlite.base import SQLiteBase, ts
from core.types import utcnow


class SQLiteHygiene(SQLiteBase):
    """``apply_change`` / ``undo_change`` of :class:`core.store.seams.MemoryStore`."""

    async def _user_id(self, user_key: str) -> int | None:
        row = await self._fetchone("SELECT uid FROM users WHERE user_key = ?", (user_key,))
        return int(row[0]) if row else None

    async def _log(
        self, uid: int, memory_id: int, event: str, change_id: str, related: int | None = None
    ) -> None:
        await self._conn.execute(
            "INSERT INTO memory_events(uid, memory_id, event, at, related_id, change_id)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (uid, memory_id, event, ts(utcnow()), related, change_id),
        )

    async def _active(self, uid: int, ids: Sequence[int]) -> dict[int, tuple[str, str, str, str]]:
        marks = ",".join("?" * len(ids))
        rows = await self._fetchall(
            f"SELECT id, source, origin, created_at, kind FROM memories"
            f" WHERE uid = ? AND superseded_by IS NULL AND id IN ({marks})",
            (uid, *ids),
        )
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    async def users_with_memories(self, *, at_least: int) -> list[str]:
        rows = await self._fetchall(
            "SELECT user_key FROM users WHERE n_docs >= ? ORDER BY uid", (at_least,)
        )
        return [r[0] for r in rows]

    async def apply_change(
        self, *, user_key: str, change_id: str, ops: Sequence[ChangeOp]
    ) -> AppliedChange:
        """Apply ``ops`` as one change. Every id must be an active memory of the user, and no
        memory may appear in two operations; else ``MemoryNotFound`` / ``StoreError`` and
        nothing changes."""
        seen: set[int] = set()
        for op in ops:
            ids = (
                op.ids
                if isinstance(op, MergeOp)
                else ((op.old_id,) if isinstance(op, SupersedeOp) else (op.memory_id,))
            )
            if seen & set(ids):
                raise StoreError("a memory appears in two operations of one change")
            seen.update(ids)
        added: list[int] = []
        superseded: list[int] = []
        retired: list[int] = []
        async with self._write():
            uid = await self._user_id(user_key)
            if uid is None:
                raise MemoryNotFound(next(iter(seen), 0))
            wanted = set(seen) | {op.new_id for op in ops if isinstance(op, SupersedeOp)}
            found = await self._active(uid, sorted(wanted)) if wanted else {}
            missing = wanted - set(found)
            if missing:
                raise MemoryNotFound(min(missing))
            now = ts(utcnow())
            for op in ops:
                if isinstance(op, RetireOp):
                    await self._retire(uid, op.memory_id, now)
                    await self._log(uid, op.memory_id, "retired", change_id)
                    retired.append(op.memory_id)
                elif isinstance(op, SupersedeOp):
                    await self._conn.execute(
                        "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ?",
                        (op.new_id, now, op.old_id),
                    )
                    await self._log(uid, op.old_id, "superseded", change_id, op.new_id)
                    superseded.append(op.old_id)
                else:
                    new_id = await self._merge(uid, op, found, now)
                    await self._log(uid, new_id, "added", change_id)
                    added.append(new_id)
                    for old in op.ids:
                        await self._log(uid, old, "superseded", change_id, new_id)
                        superseded.append(old)
        return AppliedChange(change_id, tuple(added), tuple(superseded), tuple(retired))

    async def _retire(self, uid: int, memory_id: int, now: str) -> None:
        await self._conn.execute(
            "UPDATE memories SET superseded_by = id, superseded_at = ? WHERE id = ? AND uid = ?",
            (now, memory_id, uid),
        )

    async def _merge(
        self, uid: int, op: MergeOp, found: dict[int, tuple[str, str, str, str]], now: str
    ) -> int:
        source, origin, created = merged_labels(found[i][:3] for i in op.ids)
        # Out of recall first (frees the normalised text if the new sentence equals one).
        for old in op.ids:
            await self._retire(uid, old, now)
        norm = normalize(op.text)
        twin = await self._fetchone(
            "SELECT id FROM memories WHERE uid = ? AND norm = ? AND superseded_by IS NULL",
            (uid, norm),
        )
        if twin is not None:
            raise StoreError("the merged sentence duplicates another memory")
        terms = index_terms(uid, op.text)
        cur = await self._conn.execute(
            "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
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
            ),
        )
        new_id = cast(int, cur.lastrowid)
        for old in op.ids:
            await self._conn.execute(
                "UPDATE memories SET superseded_by = ? WHERE id = ?", (new_id, old)
            )
        return new_id

    async def undo_change(self, *, user_key: str, change_id: str) -> int:
        """Restore the exact state before ``change_id``; returns the memories restored.

        Raises ``StoreError`` when the change is unknown for this user, already undone, or a
        later change built on it (undo that one first).
        """
        async with self._write():
            uid = await self._user_id(user_key)
            rows = (
                await self._fetchall(
                    "SELECT memory_id, event FROM memory_events WHERE uid = ? AND change_id = ?"
                    " ORDER BY id DESC",
                    (uid, change_id),
                )
                if uid is not None
                else []
            )
            if not rows:
                raise StoreError(f"no change {change_id!r} for this user")
            assert uid is not None
            undone = await self._fetchone(
                "SELECT 1 FROM memory_events WHERE uid = ? AND change_id = ? LIMIT 1",
                (uid, f"undo:{change_id}"),
            )
            if undone is not None:
                raise StoreError(f"change {change_id!r} was already undone")
            before = {r[0] for r in rows if r[1] != "added"}
            kept = await self._fetchone(
                "SELECT count(*) FROM memories WHERE uid = ?"
                " AND id IN (SELECT value FROM json_each(?))",
                (uid, json.dumps(sorted(before))),
            )
            if kept is not None and kept[0] < len(before):
                raise StoreError(f"change {change_id!r} {PAST_UNDO_WINDOW}")
            added = {r[0] for r in rows if r[1] == "added"}
            if added:
                marks = ",".join("?" * len(added))
                later = await self._fetchone(
                    f"SELECT 1 FROM memories WHERE uid = ? AND superseded_by IN ({marks})"
                    f" AND id NOT IN (SELECT memory_id FROM memory_events WHERE change_id = ?)",
                    (uid, *added, change_id),
                )
                if later is not None:
                    raise StoreError(f"a later change builds on {change_id!r}; undo it first")
            restored = 0
            # Merged-in memories go first, so a restored one can take back its sentence.
            for memory_id in added:
                await self._conn.execute(
                    "DELETE FROM memories WHERE id = ? AND uid = ?", (memory_id, uid)
                )
            for memory_id, event in rows:
                kind = cast(Literal["added", "superseded", "retired"], event)
                if kind != "added":
                    cur = await self._conn.execute(
                        "UPDATE memories SET superseded_by = NULL, superseded_at = NULL"
                        " WHERE id = ? AND uid = ? AND superseded_by IS NOT NULL",
                        (memory_id, uid),
                    )
                    if cur.rowcount:
                        restored += 1
                        await self._log(uid, memory_id, "restored", f"undo:{change_id}")
            return restored

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
