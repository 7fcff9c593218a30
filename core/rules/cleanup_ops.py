"""Operations of a memory cleanup change (store-agnostic data)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TypeVar

from core.platforms import LOCAL
from core.rules.about import person_key
from core.rules.places import merged_place, parse_place, place_key
from core.types import Category, Kind, Origin, Source

When = TypeVar("When", str, datetime)

UNDO_WINDOW = timedelta(days=7)
"""How long a cleanup change can be undone: its retired and superseded memories keep their
text this long, then ``purge_retired`` erases them like a forget (run by the bot with the
history pruning, :meth:`core.chat.loop.TurnLoop`), and ``undo_change`` refuses the change."""

PAST_UNDO_WINDOW = "is past the undo window (its memories were erased)"


@dataclass(frozen=True)
class MergeOp:
    """Replace ``ids`` (two or more; one for a rewording) by one new memory ``text``.

    ``days``: the ``(valid_from, valid_until)`` the new memory holds instead of the merged
    ones' (:func:`merged_whose`); None keeps theirs. Set when a dated fact is ended or
    dated (:func:`core.rules.when.ended`, a cleanup plan's "end")."""

    ids: tuple[int, ...]
    text: str
    kind: Kind
    category: Category
    days: tuple[date | None, date | None] | None = None


@dataclass(frozen=True)
class SupersedeOp:
    """``old_id`` is contradicted by the newer ``new_id``."""

    old_id: int
    new_id: int


@dataclass(frozen=True)
class RetireOp:
    """``memory_id`` breaks the rules of what to keep (transient, one-off)."""

    memory_id: int


ChangeOp = MergeOp | SupersedeOp | RetireOp


def op_ids(op: ChangeOp) -> tuple[int, ...]:
    """The memories ``op`` takes out of recall: a merge's ``ids``, a supersede's ``old_id``,
    a retire's ``memory_id`` (a supersede's ``new_id`` stays active and is not listed)."""
    if isinstance(op, MergeOp):
        return op.ids
    if isinstance(op, SupersedeOp):
        return (op.old_id,)
    return (op.memory_id,)


@dataclass(frozen=True)
class AppliedChange:
    """What a change did: memories added, superseded and retired (ids)."""

    change_id: str
    added: tuple[int, ...]
    superseded: tuple[int, ...]
    retired: tuple[int, ...]


Whose = tuple[str | None, date | None, date | None]
"""A memory's ``(about, valid_from, valid_until)``: whose fact it is and the days it holds."""


def merged_whose(parts: Sequence[Whose]) -> Whose:
    """Whose fact a memory merged from ``parts`` is, and the days it holds: the parts'
    person (they must all be about the same one, :func:`core.rules.about.same_person`;
    a merge never turns another person's fact into the user's), from the earliest first
    day to the latest last day, unbounded on a side where any part is.

    Raises ``ValueError`` when the parts are about different people."""
    people = {person_key(about) for about, _, _ in parts}
    if len(people) > 1:
        raise ValueError("the merged memories are about different people")
    about = next((a for a, _, _ in parts if a), None)
    firsts = [f for _, f, _ in parts]
    lasts = [u for _, _, u in parts]
    first = None if not firsts or None in firsts else min(f for f in firsts if f is not None)
    last = None if not lasts or None in lasts else max(u for u in lasts if u is not None)
    return about, first, last


def merged_labels(
    parts: Iterable[tuple[str, str, When, str | None]],
) -> tuple[Source, Origin, When, str]:
    """Source, origin, creation time and place of a memory merged from ``parts`` (each its
    ``(source, origin, created_at, place)``, the place as stored:
    :func:`core.rules.places.place_key`): ``remember`` when the user added any part (cleanup
    keeps protecting it), ``private`` when any part was private (never widened to shared),
    the earliest creation time, and the parts' place when they share one reach, else the
    owner's DM (a merge never widens where any part may be used:
    :func:`core.rules.places.merged_place`)."""
    rows = list(parts)
    source: Source = "remember" if any(r[0] == "remember" for r in rows) else "reflection"
    origin: Origin = "private" if any(r[1] == "private" for r in rows) else "shared"
    places = [parse_place(r[3]) for r in rows]
    platform = next((p.platform for p in places if p is not None), LOCAL)
    place = merged_place(places, user_key=platform)
    return source, origin, min(r[2] for r in rows), place_key(place)
