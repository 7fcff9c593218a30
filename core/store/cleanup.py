"""Cleanup changes, written once for every backend: validation, dispatch and undo planning.

A change is a set of operations (:mod:`core.rules.cleanup_ops`) applied in one transaction,
every resulting event tagged with the change id:

- merge: a new memory (the better sentence) is added and the merged ones are superseded by it;
- supersede: an older memory is superseded by a newer one;
- retire: a memory leaves recall with nothing replacing it (marked superseded by itself).

``undo_change`` restores the exact previous rows: merged-in memories are deleted, superseded
and retired ones become active again with their original columns (``updated_at`` included);
``restored`` events (change id ``undo:<id>``) record it.

Undo window: retired and superseded memories keep their text for ``UNDO_WINDOW`` (7 days,
:mod:`core.rules.cleanup_ops`); then ``purge_retired`` erases them as ``forget`` does and the
change can no longer be undone.

The rules here decide what to run and when to refuse, over a :class:`ChangeTx`: one user's
memories inside one open write transaction, which :class:`core.store.memories.MemoryRules`
opens. Its SQL is written once too (:class:`StatementChangeTx`: ``?`` placeholders, an id list
written ``{ids}``); a backend gives only a :class:`ChangeSql`, the run of one statement
in its transaction (SQLite: :mod:`core.store.sqlite.tx`, PostgreSQL:
:mod:`core.store.postgres.tx`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Protocol

from core.errors import MemoryNotFound, StoreError
from core.rules.cleanup_ops import (
    PAST_UNDO_WINDOW,
    AppliedChange,
    ChangeOp,
    MergeOp,
    RetireOp,
    SupersedeOp,
    When,
    Whose,
    merged_labels,
    merged_whose,
    op_ids,
)
from core.rules.places import parse_place, reach_of
from core.rules.text import index_terms, normalize
from core.types import Origin, Source, utcnow

MERGED_INSERT = (
    "INSERT INTO memories(uid, text, norm, terms, n_terms, kind, category, source, origin,"
    " created_at, updated_at, place, reach) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""The merged memory's row (``?`` placeholders; PostgreSQL numbers them and adds
``RETURNING id``), its values from :func:`merged_row`."""


def merged_row(
    uid: int,
    op: MergeOp,
    *,
    norm: str,
    terms: Sequence[str],
    labels: tuple[Source, Origin, object, str],
    now: object,
) -> tuple[object, ...]:
    """:data:`MERGED_INSERT`'s values: ``labels`` = source, origin, created_at, place;
    ``now`` (updated_at) and created_at in the backend's time form."""
    source, origin, created, place = labels
    return (
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
        place,
        reach_of(parse_place(place)),
    )


class ChangeTx(Protocol[When]):
    """One user's memories inside one open write transaction of a backend: SQL only.

    ``uid`` is the user's row id; every statement is scoped by it.
    """

    uid: int

    async def active(
        self, ids: Sequence[int]
    ) -> dict[int, tuple[Source, Origin, When, str | None]]:
        """``{id: (source, origin, created_at, place)}`` of those ``ids`` that are the
        user's active memories (``created_at`` in the backend's own time type, ``place`` as
        stored)."""
        ...

    async def retire(self, memory_id: int) -> None:
        """Out of recall with nothing replacing it (``superseded_by = id``), now."""
        ...

    async def supersede(self, *, old_id: int, new_id: int) -> None:
        """``old_id`` superseded by ``new_id``, now."""
        ...

    async def has_active_norm(self, norm: str) -> bool:
        """True when an active memory of the user has this normalised text."""
        ...

    async def insert_merged(
        self,
        *,
        op: MergeOp,
        norm: str,
        terms: Sequence[str],
        labels: tuple[Source, Origin, When, str],
    ) -> int:
        """Insert the merged memory (``labels`` = source, origin, created_at, place); its
        id."""
        ...

    async def point_to(self, *, ids: Sequence[int], new_id: int) -> None:
        """Set ``superseded_by = new_id`` on ``ids`` (already out of recall)."""
        ...

    async def whose(self, ids: Sequence[int]) -> list[Whose]:
        """``(about, valid_from, valid_until)`` of each of the user's memories ``ids``."""
        ...

    async def set_whose(self, *, memory_id: int, whose: Whose) -> None:
        """Set ``about``, ``valid_from`` and ``valid_until`` of ``memory_id``."""
        ...

    async def log(
        self, *, memory_id: int, event: str, change_id: str, related: int | None = None
    ) -> None:
        """Append one memory event tagged with ``change_id``."""
        ...

    async def change_events(self, change_id: str) -> list[tuple[int, str]]:
        """``(memory_id, event)`` of the change's events, newest first."""
        ...

    async def has_events(self, change_id: str) -> bool:
        """True when any event carries ``change_id``."""
        ...

    async def count_existing(self, ids: Sequence[int]) -> int:
        """How many of ``ids`` still exist (any state)."""
        ...

    async def built_on(self, *, added: Sequence[int], change_id: str) -> bool:
        """True when a memory outside the change is superseded by one of ``added``."""
        ...

    async def delete(self, ids: Sequence[int]) -> None:
        """Delete the user's memories ``ids`` outright (no events)."""
        ...

    async def reactivate(self, memory_id: int) -> bool:
        """Put a superseded or retired memory back into recall; False if it was active."""
        ...


class ChangeSql(Protocol):
    """A backend's run of one statement inside its open write transaction: all a backend
        writes for cleanup changes. Statements come with ``?`` placeholders (PostgreSQL numbers
        them) and, where they take a list of memory ids, ``{ids}`` (``id IN {ids}``);
    parameters as Python gives them (a time as an aware
        ``datetime``, a day as a ``date``, an id list as a ``list``), each put in the backend's
        stored form here."""

    id_list: str
    """What stands for ``{ids}``: a parenthesised set of ids from one ``?`` parameter
    (SQLite ``(SELECT value FROM json_each(?))``, PostgreSQL ``(SELECT unnest(?::bigint[]))``)."""

    async def run(self, sql: str, *params: object) -> int:
        """Run one statement; how many rows it changed."""
        ...

    async def rows(self, sql: str, *params: object) -> Sequence[Sequence[Any]]:
        """The rows one query returns (times and days as the backend stores them)."""
        ...

    async def insert(self, sql: str, *params: object) -> int:
        """Run one ``INSERT`` of a memory; the new row's id."""
        ...


class StatementChangeTx:
    """:class:`ChangeTx`, its SQL written once over a backend's :class:`ChangeSql` (times in
    the backend's own type where they are read and handed back: ``created_at``)."""

    def __init__(self, sql: ChangeSql, uid: int) -> None:
        self.sql, self.uid, self.now = sql, uid, utcnow()

    def _ids(self, statement: str) -> str:
        return statement.format(ids=self.sql.id_list)

    async def active(self, ids: Sequence[int]) -> dict[int, tuple[Source, Origin, Any, str | None]]:
        rows = await self.sql.rows(
            self._ids(
                "SELECT id, source, origin, created_at, place FROM memories"
                " WHERE uid = ? AND superseded_by IS NULL AND id IN {ids}"
            ),
            self.uid,
            list(ids),
        )
        return {int(r[0]): (r[1], r[2], r[3], r[4]) for r in rows}

    async def retire(self, memory_id: int) -> None:
        await self.sql.run(
            "UPDATE memories SET superseded_by = id, superseded_at = ? WHERE id = ? AND uid = ?",
            self.now,
            memory_id,
            self.uid,
        )

    async def supersede(self, *, old_id: int, new_id: int) -> None:
        await self.sql.run(
            "UPDATE memories SET superseded_by = ?, superseded_at = ? WHERE id = ? AND uid = ?",
            new_id,
            self.now,
            old_id,
            self.uid,
        )

    async def has_active_norm(self, norm: str) -> bool:
        return bool(
            await self.sql.rows(
                "SELECT 1 FROM memories WHERE uid = ? AND norm = ? AND superseded_by IS NULL",
                self.uid,
                norm,
            )
        )

    async def insert_merged(
        self,
        *,
        op: MergeOp,
        norm: str,
        terms: Sequence[str],
        labels: tuple[Source, Origin, Any, str],
    ) -> int:
        row = merged_row(self.uid, op, norm=norm, terms=terms, labels=labels, now=self.now)
        return await self.sql.insert(MERGED_INSERT, *row)

    async def whose(self, ids: Sequence[int]) -> list[Whose]:
        rows = await self.sql.rows(
            self._ids(
                "SELECT about, valid_from, valid_until FROM memories WHERE uid = ? AND id IN {ids}"
            ),
            self.uid,
            list(ids),
        )
        return [(r[0], _day(r[1]), _day(r[2])) for r in rows]

    async def set_whose(self, *, memory_id: int, whose: Whose) -> None:
        about, first, last = whose
        await self.sql.run(
            "UPDATE memories SET about = ?, valid_from = ?, valid_until = ?"
            " WHERE id = ? AND uid = ?",
            about,
            first,
            last,
            memory_id,
            self.uid,
        )

    async def point_to(self, *, ids: Sequence[int], new_id: int) -> None:
        await self.sql.run(
            self._ids("UPDATE memories SET superseded_by = ? WHERE uid = ? AND id IN {ids}"),
            new_id,
            self.uid,
            list(ids),
        )

    async def log(
        self, *, memory_id: int, event: str, change_id: str, related: int | None = None
    ) -> None:
        await self.sql.run(
            "INSERT INTO memory_events(uid, memory_id, event, at, related_id, change_id)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            self.uid,
            memory_id,
            event,
            utcnow(),
            related,
            change_id,
        )

    async def change_events(self, change_id: str) -> list[tuple[int, str]]:
        rows = await self.sql.rows(
            "SELECT memory_id, event FROM memory_events WHERE uid = ? AND change_id = ?"
            " ORDER BY id DESC",
            self.uid,
            change_id,
        )
        return [(int(r[0]), str(r[1])) for r in rows]

    async def has_events(self, change_id: str) -> bool:
        return bool(
            await self.sql.rows(
                "SELECT 1 FROM memory_events WHERE uid = ? AND change_id = ? LIMIT 1",
                self.uid,
                change_id,
            )
        )

    async def count_existing(self, ids: Sequence[int]) -> int:
        rows = await self.sql.rows(
            self._ids("SELECT count(*) FROM memories WHERE uid = ? AND id IN {ids}"),
            self.uid,
            list(ids),
        )
        return int(rows[0][0])

    async def built_on(self, *, added: Sequence[int], change_id: str) -> bool:
        return bool(
            await self.sql.rows(
                self._ids(
                    "SELECT 1 FROM memories WHERE uid = ? AND superseded_by IN {ids}"
                    " AND id NOT IN (SELECT memory_id FROM memory_events WHERE change_id = ?)"
                    " LIMIT 1"
                ),
                self.uid,
                list(added),
                change_id,
            )
        )

    async def delete(self, ids: Sequence[int]) -> None:
        await self.sql.run(
            self._ids("DELETE FROM memories WHERE uid = ? AND id IN {ids}"), self.uid, list(ids)
        )

    async def reactivate(self, memory_id: int) -> bool:
        changed = await self.sql.run(
            "UPDATE memories SET superseded_by = NULL, superseded_at = NULL"
            " WHERE id = ? AND uid = ? AND superseded_by IS NOT NULL",
            memory_id,
            self.uid,
        )
        return changed > 0


def _day(value: object) -> date | None:
    """A stored day (SQLite: ``YYYY-MM-DD`` text; PostgreSQL: a ``date``) as a ``date``."""
    if value is None or isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def check_disjoint(ops: Sequence[ChangeOp]) -> set[int]:
    """The memories the change takes out of recall; ``StoreError`` when one appears in two
    operations (checked before any transaction opens)."""
    seen: set[int] = set()
    for op in ops:
        ids = op_ids(op)
        if seen & set(ids):
            raise StoreError("a memory appears in two operations of one change")
        seen.update(ids)
    return seen


def no_such_user(seen: set[int]) -> MemoryNotFound:
    """The error for a change on a user with no memories at all."""
    return MemoryNotFound(next(iter(seen), 0))


async def apply_ops(
    tx: ChangeTx[When], *, change_id: str, ops: Sequence[ChangeOp], seen: set[int]
) -> AppliedChange:
    """Apply ``ops`` (validated by :func:`check_disjoint`, giving ``seen``) in ``tx``.

    Raises ``MemoryNotFound`` (lowest id) when an id is not an active memory of the user and
    ``StoreError`` when a merged sentence duplicates another active memory; the caller's
    transaction then rolls back and nothing changes.
    """
    wanted = set(seen) | {op.new_id for op in ops if isinstance(op, SupersedeOp)}
    found = await tx.active(sorted(wanted)) if wanted else {}
    missing = wanted - set(found)
    if missing:
        raise MemoryNotFound(min(missing))
    added: list[int] = []
    superseded: list[int] = []
    retired: list[int] = []
    for op in ops:
        if isinstance(op, RetireOp):
            await tx.retire(op.memory_id)
            await tx.log(memory_id=op.memory_id, event="retired", change_id=change_id)
            retired.append(op.memory_id)
        elif isinstance(op, SupersedeOp):
            await tx.supersede(old_id=op.old_id, new_id=op.new_id)
            await tx.log(
                memory_id=op.old_id, event="superseded", change_id=change_id, related=op.new_id
            )
            superseded.append(op.old_id)
        else:
            new_id = await _merge(tx, op, found)
            await tx.log(memory_id=new_id, event="added", change_id=change_id)
            added.append(new_id)
            for old in op.ids:
                await tx.log(memory_id=old, event="superseded", change_id=change_id, related=new_id)
                superseded.append(old)
    return AppliedChange(change_id, tuple(added), tuple(superseded), tuple(retired))


async def _merge(
    tx: ChangeTx[When], op: MergeOp, found: dict[int, tuple[Source, Origin, When, str | None]]
) -> int:
    labels = merged_labels(found[i] for i in op.ids)
    try:  # a merge never makes another person's fact the user's, nor drops its days
        whose = merged_whose(await tx.whose(op.ids))
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    if op.days is not None:  # an ended or dated fact: its new days
        whose = (whose[0], op.days[0], op.days[1])
    # Out of recall first (frees the normalised text if the new sentence equals one).
    for old in op.ids:
        await tx.retire(old)
    norm = normalize(op.text)
    if await tx.has_active_norm(norm):
        raise StoreError("the merged sentence duplicates another memory")
    new_id = await tx.insert_merged(
        op=op, norm=norm, terms=index_terms(tx.uid, op.text), labels=labels
    )
    await tx.point_to(ids=op.ids, new_id=new_id)
    if whose != (None, None, None):
        await tx.set_whose(memory_id=new_id, whose=whose)
    return new_id


async def undo(tx: ChangeTx[When] | None, *, change_id: str) -> int:
    """Restore the exact state before ``change_id`` in ``tx`` (None: the user has no row);
    returns the memories restored.

    Raises ``StoreError`` when the change is unknown for this user, already undone, past the
    undo window (its memories were erased), or a later change built on it (undo that first).
    """
    rows = await tx.change_events(change_id) if tx is not None else []
    if tx is None or not rows:
        raise StoreError(f"no change {change_id!r} for this user")
    if await tx.has_events(f"undo:{change_id}"):
        raise StoreError(f"change {change_id!r} was already undone")
    before = sorted({m for m, event in rows if event != "added"})
    if await tx.count_existing(before) < len(before):
        raise StoreError(f"change {change_id!r} {PAST_UNDO_WINDOW}")
    added = sorted({m for m, event in rows if event == "added"})
    if added:
        if await tx.built_on(added=added, change_id=change_id):
            raise StoreError(f"a later change builds on {change_id!r}; undo it first")
        # Merged-in memories go first, so a restored one can take back its sentence.
        await tx.delete(added)
    restored = 0
    for memory_id, event in rows:
        if event != "added" and await tx.reactivate(memory_id):
            restored += 1
            await tx.log(memory_id=memory_id, event="restored", change_id=f"undo:{change_id}")
    return restored
