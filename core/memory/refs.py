"""What a button that names a memory carries: its id AND proof of which memory it meant.

A Forget button (Slack's "I'll remember" note and Home tab, Discord's ``/forget`` choices)
outlives the page it is on: it can be pressed hours later, from a message posted before a
restore from backup. Its value is :func:`memory_ref`, ``"{id}.{created}"``: the memory's id
and its creation time in microseconds since the Unix epoch (UTC). A click acts only when the
user's memory with that id still has that creation time
(:meth:`core.memory.service.MemoryService.forget_ref`); otherwise it does nothing and says so
(:data:`STALE_BUTTON`). Ids alone are never reused by the store either (SQLite
AUTOINCREMENT, PostgreSQL identity), so the creation time guards what a backup restored or
a copied store could bring back.

A value in the old format (the bare id, on buttons posted before this rule) proves nothing
and is refused the same way: never acted on, whatever memory has that id now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.types import Memory

STALE_BUTTON = (
    "This button is out of date, so nothing was forgotten: `/memories` lists what I keep now."
)
"""The one sentence a stale or old-format Forget button answers."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_REF = re.compile(r"([1-9][0-9]{0,18})\.(-?[0-9]{1,20})")


def created_stamp(created_at: datetime) -> int:
    """``created_at`` as whole microseconds since the Unix epoch (exact: no float)."""
    return (created_at - _EPOCH) // _MICROSECOND


@dataclass(frozen=True, slots=True)
class MemoryRef:
    """A parsed :func:`memory_ref`: the id and the creation stamp it was made with."""

    memory_id: int
    created: int

    def names(self, memory: Memory) -> bool:
        """True when ``memory`` is the one this reference was made for."""
        return memory.id == self.memory_id and created_stamp(memory.created_at) == self.created


def memory_ref(memory: Memory) -> str:
    """The value of a button that names ``memory``: ``"{id}.{created}"`` (at most 40 ASCII
    characters, within Slack's 2,000 for a button value and Discord's 100 for a choice)."""
    return f"{memory.id}.{created_stamp(memory.created_at)}"


def parse_memory_ref(value: str) -> MemoryRef | None:
    """The reference in a button's ``value``; None for anything else: an old-format bare id,
    an empty, forged or over-long value (never an exception)."""
    match = _REF.fullmatch(value) if len(value) <= 48 else None
    if match is None:
        return None
    memory_id = int(match.group(1))
    if memory_id > 2**63 - 1:
        return None
    return MemoryRef(memory_id=memory_id, created=int(match.group(2)))
