"""Labels for memories stored before ``/remember`` had them (migration m011, both backends).

Until then every ``/remember``, CLI ``memories remember`` and import line without a kind was
stored as ``fact``/``general``; the standing profile (:mod:`core.memory.profile`) chooses by
kind and category, so those memories never entered it. The migration gives each active one
the labels :func:`core.rules.classify.classify` gives its text today (the same rule that now
labels new ones); text, ids and history are unchanged.
"""

from __future__ import annotations

from core.rules.classify import classify
from core.store.text_repair import BATCH_ROWS, Execute, Fetch


async def relabel_remembered(*, fetch: Fetch, execute: Execute) -> int:
    """Relabel active ``remember``/``import`` memories still ``fact``/``general``; returns how
    many changed. SQL with ``?`` placeholders (PostgreSQL's caller numbers them)."""
    changed = 0
    after = 0
    while True:
        rows = await fetch(
            "SELECT id, text FROM memories WHERE id > ? AND superseded_by IS NULL"
            " AND source IN ('remember', 'import') AND kind = 'fact' AND category = 'general'"
            " ORDER BY id LIMIT ?",
            (after, BATCH_ROWS),
        )
        if not rows:
            return changed
        for memory_id, text in rows:
            kind, category = classify(str(text))
            if (kind, category) != ("fact", "general"):
                await execute(
                    "UPDATE memories SET kind = ?, category = ? WHERE id = ?",
                    (kind, category, memory_id),
                )
                changed += 1
        after = int(rows[-1][0])
