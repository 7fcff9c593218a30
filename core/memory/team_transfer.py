"""Export and import of a channel's own memory with who said each entry (team memory,
:mod:`core.memory.team`).

An export line is a memory's (:func:`core.memory.service.memory_to_export`) plus the
entry's :class:`core.types.Attribution`: ``said_by`` (a user key), ``said_by_name``,
``said_at`` (ISO 8601 with its offset), ``link`` (the message's Slack permalink or Discord
jump URL) and ``changed_by``; a field without a value is null. Imported as a user's
memories, these fields are ignored. Imported into a channel (:func:`import_entries`), each
line is checked like a memory's line and its attribution as well (every bad line named,
nothing imported), and each entry it stores, or an entry of the channel it duplicates word
for word that has no attribution yet, gets the line's. An entry that already names who
said it keeps its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from core.errors import ImportFormatError
from core.memory.service import ImportResult, MemoryService, memory_to_export, parse_import_line
from core.rules.text import needs_cleaning, normalize
from core.types import Attribution, Memory

MAX_KEY_CHARS = 200
"""The longest ``said_by`` / ``changed_by`` an import accepts (a user key)."""
MAX_NAME_CHARS = 100
"""The longest ``said_by_name`` an import accepts."""
MAX_LINK_CHARS = 1000
"""The longest ``link`` an import accepts."""
_LINK = re.compile(r"^https?://[^\s/]+/\S*$")
_FIELDS = ("said_by", "said_by_name", "said_at", "link", "changed_by")


class EntryStore(Protocol):
    """What export and import read and write besides the memories' import (parts of the
    memory and channel seams)."""

    async def export(self, *, user_key: str) -> list[Memory]: ...

    async def attributions(
        self, *, channel_key: str, memory_ids: Sequence[int] | None
    ) -> dict[int, Attribution]: ...

    async def attribute(self, *, channel_key: str, entries: Sequence[Attribution]) -> None: ...


def entry_to_export(memory: Memory, said: Attribution | None) -> dict[str, Any]:
    """One export line of a channel entry: the memory's fields and who said it."""
    return {
        **memory_to_export(memory),
        "said_by": said.said_by if said else None,
        "said_by_name": said.said_by_name if said else None,
        "said_at": said.said_at.isoformat() if said else None,
        "link": said.link if said else None,
        "changed_by": said.changed_by if said else None,
    }


async def export_entries(store: EntryStore, *, channel_key: str) -> list[dict[str, Any]]:
    """The channel's active entries as export lines, oldest first."""
    entries = await store.export(user_key=channel_key)
    said = await store.attributions(channel_key=channel_key, memory_ids=None)
    return [entry_to_export(m, said.get(m.id)) for m in entries]


def _text(obj: dict[str, Any], key: str, limit: int, line: int) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ImportFormatError(line, f"{key} must be a string of 1 to {limit} characters")
    if needs_cleaning(value) or value != value.strip():
        raise ImportFormatError(line, f"{key} holds control or invisible characters")
    return value


def parse_attribution(obj: dict[str, Any], line: int) -> Attribution | None:
    """Who said the entry of one export line, parsed (``memory_id`` 0: not stored yet); None
    for a line without ``said_at`` and the other fields. Raises ``ImportFormatError`` naming
    ``line`` for a malformed field (a ``said_at`` without offset, a link that is not
    http(s), a name with control characters, ...)."""
    if all(obj.get(f) is None for f in _FIELDS):
        return None
    said_by = _text(obj, "said_by", MAX_KEY_CHARS, line)
    changed_by = _text(obj, "changed_by", MAX_KEY_CHARS, line)
    name = _text(obj, "said_by_name", MAX_NAME_CHARS, line)
    link = _text(obj, "link", MAX_LINK_CHARS, line)
    if link is not None and not _LINK.match(link):
        raise ImportFormatError(line, "link must be an http(s) URL")
    at = obj.get("said_at")
    if not isinstance(at, str):
        raise ImportFormatError(line, "said_at (an ISO 8601 time) is needed with who said it")
    try:
        said_at = datetime.fromisoformat(at)
    except ValueError:
        raise ImportFormatError(line, "said_at is not an ISO 8601 time") from None
    if said_at.tzinfo is None:
        raise ImportFormatError(line, "said_at needs a timezone")
    return Attribution(
        memory_id=0,
        said_at=said_at,
        said_by=said_by,
        said_by_name=name,
        link=link,
        changed_by=changed_by,
    )


async def import_entries(
    service: MemoryService, store: EntryStore, *, channel_key: str, lines: Sequence[str]
) -> ImportResult:
    """Import JSON Lines into the channel's memory (:meth:`MemoryService.import_lines`) and
    give the entries it stored (or found word for word without a speaker) the attribution
    their lines carry (the module's rule). Raises ``ImportFormatError`` naming every bad
    line before anything is written."""
    said: list[tuple[str, Attribution]] = []
    unusable: list[ImportFormatError] = []  # the memory's part: import_lines names these
    problems: list[ImportFormatError] = []  # the attribution's
    for number, raw in enumerate(lines, start=1):
        try:
            parsed = parse_import_line(raw, number)
        except ImportFormatError as exc:
            unusable.append(exc)
            continue
        if parsed is None:  # a blank line
            continue
        try:
            attribution = parse_attribution(json.loads(raw), number)  # an object: parsed
        except ImportFormatError as exc:
            problems.append(exc)
            continue
        if attribution is not None:
            said.append((normalize(parsed.text), attribution))
    if problems:
        raise ImportFormatError.of(sorted(unusable + problems, key=lambda e: e.line))
    result = await service.import_lines(user_key=channel_key, lines=lines)
    if said:
        stored = {normalize(m.text): m.id for m in await store.export(user_key=channel_key)}
        known = await store.attributions(channel_key=channel_key, memory_ids=list(stored.values()))
        fresh: dict[int, Attribution] = {}
        for norm, attribution in said:
            memory_id = stored.get(norm)
            if memory_id is not None and memory_id not in known and memory_id not in fresh:
                fresh[memory_id] = Attribution(
                    memory_id=memory_id,
                    said_at=attribution.said_at,
                    said_by=attribution.said_by,
                    said_by_name=attribution.said_by_name,
                    link=attribution.link,
                    changed_by=attribution.changed_by,
                )
        await store.attribute(channel_key=channel_key, entries=list(fresh.values()))
    return result
