"""Row shapes both backends share: the column list of a turn and its mapping to
:class:`core.types.Turn` (each backend keeps only how it stores a time), and the totals of a
usage report with their mapping to :class:`core.types.UsageRow`, and a memory's uses
(:class:`core.types.MemoryUse`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from core.rules.places import check_reaches, parse_place, place_key
from core.types import MemoryUse, Place, Turn, UsageRow

TURN_COLUMNS = (
    "id, conversation_key, user_key, role, text, origin, sent_at, author, reply_to, reflection,"
    " attempts, platform_ref, workspace, reply_ref, thread_ref, place"
)
"""The columns :func:`turn_from_row` reads, in its order (``SELECT {TURN_COLUMNS} FROM turns``)."""


def _as_is(value: Any) -> datetime:
    assert isinstance(value, datetime)
    return value


def turn_from_row(row: Sequence[Any], *, time: Callable[[Any], datetime] = _as_is) -> Turn:
    """The turn in ``row`` (columns :data:`TURN_COLUMNS`); ``time`` reads ``sent_at`` as the
    backend stores it (PostgreSQL: a ``datetime`` already; SQLite: ISO text)."""
    return Turn(
        id=row[0],
        conversation_key=row[1],
        user_key=row[2],
        role=row[3],
        text=row[4],
        origin=row[5],
        sent_at=time(row[6]),
        author=row[7],
        reply_to=row[8],
        reflection=row[9],
        attempts=row[10],
        platform_ref=row[11],
        workspace=row[12],
        reply_ref=row[13],
        thread_ref=row[14],
        place=parse_place(row[15]),
    )


USAGE_TOTALS = (
    "COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_input_tokens),"
    " SUM(cache_creation_input_tokens)"
)
"""The aggregates :func:`usage_row` reads after the group column
(``SELECT {group}, {USAGE_TOTALS} FROM usage ... GROUP BY 1``)."""


def usage_filter(
    since: object, user_key: str | None, workspace: str | None
) -> tuple[str, list[object]]:
    """The ``WHERE`` of a usage report or count (``?`` placeholders) and its parameters: calls
    at or after ``since`` (as the backend stores a time), of ``user_key`` and in
    ``workspace`` when given."""
    where, params = ["at >= ?"], [since]
    if user_key is not None:
        where.append("user_key = ?")
        params.append(user_key)
    if workspace is not None:
        where.append("workspace = ?")
        params.append(workspace)
    return " AND ".join(where), params


def usage_row(row: Sequence[Any]) -> UsageRow:
    """One group of a usage report: its label, then the columns of :data:`USAGE_TOTALS`."""
    return UsageRow(str(row[0]), *(int(v) for v in row[1:6]))


STANDING = "(m.kind <> 'fact' OR m.category <> 'general')"
"""The SQL condition of a memory that may enter the standing profile (every kind but a plain
``fact`` of category ``general``; :mod:`core.memory.profile`). Written exactly as in the
partial index ``memories_standing`` (m011), so both backends answer from that index."""


def memory_filter(
    *,
    include_superseded: bool,
    standing: bool,
    reach: Sequence[str] | None,
    one_copy: bool = False,
) -> str | None:
    """The ``AND ...`` conditions that ``list_memories`` adds for memories aliased ``m``
    (both backends); None when ``reach`` is empty (nothing can match). ``reach`` holds
    reach tokens only (:func:`core.rules.places.check_reaches`; anything else raises
    ``ValueError``), so they are written into the SQL as literals. ``one_copy``: active
    copies of one sentence learned in several places (one per reach,
    :mod:`core.rules.reassert`) are listed once, as their newest (:data:`ONE_COPY`)."""
    parts = []
    if not include_superseded:
        parts.append(" AND m.superseded_by IS NULL")
        if one_copy:
            parts.append(ONE_COPY)
    if standing:
        parts.append(f" AND {STANDING}")
    if reach is not None:
        chosen = check_reaches(reach)
        if not chosen:
            return None
        parts.append(" AND m.reach IN (" + ", ".join(f"'{r}'" for r in chosen) + ")")
    return "".join(parts)


ONE_COPY = (
    " AND NOT EXISTS (SELECT 1 FROM memories c WHERE c.uid = m.uid"
    " AND c.norm = m.norm AND c.superseded_by IS NULL AND +c.id > m.id)"
)
"""The condition of an active memory ``m`` with no newer active copy. ``+c.id`` keeps both
planners on the unique index ``memories_active_norm (uid, norm, reach)``: on ``c.id`` alone
SQLite walks ``memories_by_user`` through every newer memory (6 ms for 200 rows of a user
with 10,000, against 0.14 ms)."""

ONE_COPY_COUNT = (
    "SELECT u.n_docs - (SELECT count(*) FROM memories m WHERE m.uid = u.uid"
    " AND m.superseded_by IS NULL AND m.reach <> 'dm' AND EXISTS (SELECT 1 FROM memories c"
    " WHERE c.uid = m.uid AND c.norm = m.norm AND c.superseded_by IS NULL"
    " AND c.reach < m.reach)) FROM users u WHERE u.user_key = {}"
)
"""The user's active sentences, each counted once however many places it was learned in
(``{}``: the backend's placeholder for the user key): their active memories less every
copy but one of each sentence. The copies of one sentence have different reaches (the
unique index ``memories_active_norm``), and ``dm`` sorts before every other reach token
(``in_...``, ``pub_...``), so the copies with a smaller reach beside them are all but one of
each sentence and never ``dm``. Only memories learned outside the owner's DM are read, from
the partial index ``memories_placed`` (m025): nothing for a user whose memories were all
learned in the DM, however many (``count(DISTINCT norm)`` read all 10,000 of such a user, 1.3
ms on SQLite, 3 ms on PostgreSQL)."""


def place_column(place: Place | None) -> str | None:
    """A turn's ``place`` column (:func:`core.rules.places.place_key`; None: not known)."""
    return None if place is None else place_key(place)


USE_COLUMNS = "memory_id, recalls, last_recalled_at, confirmations"
"""The columns :func:`use_from_row` reads, in its order (``SELECT {USE_COLUMNS} FROM
memory_uses``)."""

RECALL_LOG_STARTED = (
    "SELECT applied_at FROM schema_migrations"
    " WHERE name IN ('m015_memory_uses', 'm013_memory_uses')"
)
"""When the migration adding ``memory_uses`` ran (SQLite m015, PostgreSQL m013): recalls are
recorded from then on (:meth:`core.store.seams.RecallLog.recall_log_started`)."""


def use_from_row(
    row: Sequence[Any], *, time: Callable[[Any], datetime] = _as_is
) -> tuple[int, MemoryUse]:
    """The memory id and uses in ``row`` (columns :data:`USE_COLUMNS`); ``time`` reads
    ``last_recalled_at`` as the backend stores it (None stays None)."""
    last = None if row[2] is None else time(row[2])
    return int(row[0]), MemoryUse(int(row[1]), last, int(row[3]))
