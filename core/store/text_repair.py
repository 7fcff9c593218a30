"""Cleaning text stored before :func:`core.rules.text.clean_text` guarded every path in: the rule
behind SQLite migration ``m007_clean_text`` and PostgreSQL ``m006_clean_text``, and the
row conversion of ``db copy``. One algorithm; each backend passes its SQL runner.

What a dirty row becomes:

- a memory: its text cleaned as a memory (one line), its normalised text and index terms
  remade from it (SQLite's triggers move the FTS5 entry, PostgreSQL's regenerate ``tsv``
  and the users' BM25 totals follow in both). When the clean text equals another active
  memory of the same user, the dirty one is superseded by that twin (event ``superseded``),
  so the one-active-memory-per-text rule holds; a text left empty is retired (event
  ``retired``). The embedding, if any, stays (made from nearly the same text).
- a turn: its text cleaned with newlines kept, its author name as one line.

Rows are read in id order, ``BATCH_ROWS`` at a time, and checked in Python
(:func:`core.rules.text.needs_cleaning`): the scan is linear. Without ``execute`` the same
scan only counts (:data:`CLEAN_TEXT`, what the migration says before it runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.rules.text import clean_text, index_terms, needs_cleaning, normalize
from core.store.effects import Also, Change, Effect, Execute, Fetch

logger = logging.getLogger(__name__)

BATCH_ROWS = 5_000
"""Rows read per query while scanning a table."""

__all__ = ["BATCH_ROWS", "CLEAN_TEXT", "Execute", "Fetch", "clean_stored_text", "memory_text"]


@dataclass(frozen=True)
class MemoryText:
    """The stored forms of one memory's text: ``terms`` space-separated, as both stores
    keep them (:func:`core.rules.text.index_terms`)."""

    text: str
    norm: str
    terms: str
    n_terms: int


def memory_text(uid: int, text: str) -> MemoryText:
    """``text`` cleaned as a memory, with the normalised text and index terms of user
    ``uid`` remade from it."""
    cleaned = clean_text(text, keep_newlines=False)
    terms = index_terms(uid, cleaned)
    return MemoryText(cleaned, normalize(cleaned), " ".join(terms), len(terms))


def turn_text(text: str, author: str | None) -> tuple[str, str | None]:
    """A turn's text (newlines kept) and author (one line) cleaned."""
    return clean_text(text, keep_newlines=True), (
        None if author is None else clean_text(author, keep_newlines=False)
    )


async def clean_stored_text(*, fetch: Fetch, execute: Execute | None, now: object = None) -> Change:
    """Clean every memory and turn holding characters :func:`core.rules.text.clean_text` removes.

    ``now`` is the backend's timestamp value for ``superseded_at`` and events. Returns the
    memories rewritten (of how many users) and the turns; without ``execute``, only counts
    what it would rewrite. Runs inside the caller's transaction; database errors propagate.
    """
    memories = merged = turns = 0
    users: set[int] = set()
    last = 0
    while rows := await fetch(
        "SELECT id, uid, text, superseded_by FROM memories WHERE id > ? ORDER BY id LIMIT ?",
        (last, BATCH_ROWS),
    ):
        last = int(rows[-1][0])
        for memory_id, uid, text, superseded_by in rows:
            if not needs_cleaning(text):
                continue
            memories += 1
            users.add(int(uid))
            if execute is None:
                continue
            merged += await _clean_memory(
                fetch, execute, now, int(memory_id), int(uid), text, superseded_by is None
            )
    last = 0
    while rows := await fetch(
        "SELECT id, text, author FROM turns WHERE id > ? ORDER BY id LIMIT ?", (last, BATCH_ROWS)
    ):
        last = int(rows[-1][0])
        for turn_id, text, author in rows:
            if needs_cleaning(text) or (author is not None and needs_cleaning(author)):
                turns += 1
                if execute is None:
                    continue
                text, author = turn_text(text, author)
                await execute(
                    "UPDATE turns SET text = ?, author = ? WHERE id = ?", (text, author, turn_id)
                )
    if execute is not None:
        logger.info(
            "cleaned stored text: %d memories (%d superseded or retired), %d turns",
            memories,
            merged,
            turns,
        )
    return Change(memories, len(users), (Also(turns, "chat message", "chat messages", "cleaned"),))


async def _count_dirty(fetch: Fetch) -> Change:
    return await clean_stored_text(fetch=fetch, execute=None)


CLEAN_TEXT = Effect(
    verb="clean the text of",
    done="cleaned the text of",
    why="control characters, bidirectional overrides and zero-width spaces stored before text"
    " hygiene are removed (a memory whose clean text repeats another is superseded by it)",
    count=_count_dirty,
)
"""SQLite ``m007_clean_text``, PostgreSQL ``m006_clean_text``."""


async def _clean_memory(
    fetch: Fetch,
    execute: Execute,
    now: object,
    memory_id: int,
    uid: int,
    text: str,
    active: bool,
) -> int:
    new = memory_text(uid, text)
    replaced_by: int | None = None
    event = None
    if active and not new.text:
        replaced_by, event = memory_id, "retired"
    elif active:
        twin = await fetch(
            "SELECT id FROM memories WHERE uid = ? AND norm = ? AND superseded_by IS NULL"
            " AND id <> ?",
            (uid, new.norm, memory_id),
        )
        if twin:
            replaced_by, event = int(twin[0][0]), "superseded"
    if replaced_by is None:
        await execute(
            "UPDATE memories SET text = ?, norm = ?, terms = ?, n_terms = ? WHERE id = ?",
            (new.text, new.norm, new.terms, new.n_terms, memory_id),
        )
        return 0
    # Out of recall and rewritten in one statement: the old terms leave the index.
    await execute(
        "UPDATE memories SET text = ?, norm = ?, terms = ?, n_terms = ?, superseded_by = ?,"
        " superseded_at = ? WHERE id = ?",
        (new.text, new.norm, new.terms, new.n_terms, replaced_by, now, memory_id),
    )
    await execute(
        "INSERT INTO memory_events(uid, memory_id, event, at, related_id) VALUES (?, ?, ?, ?, ?)",
        (uid, memory_id, event, now, None if event == "retired" else replaced_by),
    )
    return 1
