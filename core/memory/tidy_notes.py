"""What a user is told of last night's consolidation, and its undo
(:mod:`core.memory.consolidation` makes the changes): ``/memory`` and the Slack Home tab say
"tidied 3 memories last night" with an undo. Apart from the consolidation itself so that
:class:`core.memory.service.MemoryService` reads them without importing the cleanup engine
(which imports reflection, which imports the service)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import StoreError
from core.store.seams import CleanupStore, MemoryStore
from core.types import MemoryEvent

PREFIX = "tidy-"
"""The change ids of consolidation (``tidy-<YYYYMMDD>-<6 hex>``)."""
NOTE_HOURS = 36
"""How long ``/memory`` and the Home tab say "tidied ... last night" after a change."""


@dataclass(frozen=True, slots=True)
class TidyNote:
    """The last consolidation change of a user: its id, the memories it took out of recall
    and when; ``dated``: of those, the facts it gave their days or told as past (each
    reworded into one new memory that carries a last day)."""

    change_id: str
    tidied: int
    at: datetime
    dated: int = 0


def is_tidy(event: MemoryEvent) -> bool:
    """True for an event of a consolidation change or of its undo."""
    change = event.change_id or ""
    return change.startswith(PREFIX) or change.startswith(f"undo:{PREFIX}")


async def last_tidy(store: MemoryStore, *, user_key: str, now: datetime) -> TidyNote | None:
    """The user's newest consolidation change of the last :data:`NOTE_HOURS` hours that was
    not undone, or None (reads the newest 500 memory events, and the change's new memories
    that reword exactly one old one, to count the dated)."""
    events = await store.history(user_key=user_key, limit=500, newest_first=True)
    undone = {e.change_id.removeprefix("undo:") for e in events if e.change_id and
              e.change_id.startswith(f"undo:{PREFIX}")}  # fmt: skip
    newest = next((e for e in events if e.change_id and e.change_id.startswith(PREFIX)), None)
    if newest is None or newest.change_id is None or newest.change_id in undone:
        return None
    if newest.at < now - timedelta(hours=NOTE_HOURS):
        return None
    change = newest.change_id
    taken = {
        e.memory_id
        for e in events
        if e.change_id == change and e.event in ("superseded", "retired")
    }
    sources: dict[int, int] = {}
    for e in events:
        if e.change_id == change and e.event == "superseded" and e.related_id is not None:
            sources[e.related_id] = sources.get(e.related_id, 0) + 1
    added = [e.memory_id for e in events if e.change_id == change and e.event == "added"]
    dated = 0
    for memory_id in added:
        if sources.get(memory_id) == 1:
            new = await store.get(user_key=user_key, memory_id=memory_id)
            dated += new is not None and new.valid_until is not None
    return TidyNote(change, len(taken), newest.at, dated)


async def undo_tidy(store: CleanupStore, *, user_key: str, change_id: str) -> int:
    """Undo the user's consolidation change ``change_id``; the memories restored. Raises
    ``StoreError`` for an id that is not a consolidation change (or not this user's, or
    already undone: :meth:`core.store.seams.CleanupStore.undo_change`)."""
    if not change_id.startswith(PREFIX) or len(change_id) > 40:
        raise StoreError("that is not a change of mine to undo")
    return await store.undo_change(user_key=user_key, change_id=change_id)
