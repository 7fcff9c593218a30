"""Labels for memories stored before ``/remember`` had them (migration m011, both backends).

Until then every ``/remember``, CLI ``memories remember`` and import line without a kind was
stored as ``fact``/``general``; the standing profile (:mod:`core.memory.profile`) chooses by
kind and category, so those memories never entered it. The migration gives each active one
the labels :func:`core.rules.classify.classify` gives its text today (the same rule that now
labels new ones); text, ids and history are unchanged.
"""

from __future__ import annotations

from core.rules.classify import classify
from core.store.effects import Change, Effect, Execute, Fetch
from core.store.text_repair import BATCH_ROWS


async def relabel_remembered(*, fetch: Fetch, execute: Execute | None) -> Change:
    """Relabel active ``remember``/``import`` memories still ``fact``/``general``; returns how
    many changed, of how many users (without ``execute``: would change). SQL with ``?``
    placeholders (PostgreSQL's caller numbers them)."""
    changed = 0
    users: set[int] = set()
    after = 0
    while True:
        rows = await fetch(
            "SELECT id, text, uid FROM memories WHERE id > ? AND superseded_by IS NULL"
            " AND source IN ('remember', 'import') AND kind = 'fact' AND category = 'general'"
            " ORDER BY id LIMIT ?",
            (after, BATCH_ROWS),
        )
        if not rows:
            return Change(changed, len(users))
        for memory_id, text, uid in rows:
            kind, category = classify(str(text))
            if (kind, category) != ("fact", "general"):
                if execute is not None:
                    await execute(
                        "UPDATE memories SET kind = ?, category = ? WHERE id = ?",
                        (kind, category, memory_id),
                    )
                changed += 1
                users.add(int(uid))
        after = int(rows[-1][0])


async def _count_unlabelled(fetch: Fetch) -> Change:
    return await relabel_remembered(fetch=fetch, execute=None)


LABEL_REMEMBERED = Effect(
    verb="relabel",
    done="relabelled",
    why="memories /remember and import stored as fact/general get the kind and category the"
    " offline rule gives their text, so the standing profile can choose them (text unchanged)",
    count=_count_unlabelled,
)
"""SQLite ``m012_label_remembered``, PostgreSQL ``m010_label_remembered``."""
