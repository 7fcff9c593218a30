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

Each backend supplies a :class:`ChangeTx`: its SQL for one user inside one open write
transaction (SQLite: :mod:`core.store.sqlite.tx`, PostgreSQL: :mod:`core.store.postgres.tx`),
which :class:`core.store.memories.MemoryRules` opens. The rules here decide what to run and
when to refuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
from core.types import Origin, Source

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
