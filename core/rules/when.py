"""The days a message names: "on 9 November, 2022", "October 13, 2023", "in May 2023", "2023".

Recall puts the memories stored on the named days first (:mod:`core.memory.hybrid`): a memory
keeps the day it was stored (``created_at``), and a question that names a day ("What did I
cook on 9 November?") asks about what the user said around then, words that the memory itself
seldom holds. :func:`named_days` reads absolute English dates only (day month year, month day
year, month year, a year alone; month names in full or in three letters); a day with no year
("on 9 November") or a relative one ("last week") names nothing here. Pure and cheap: the
message is searched for a four-digit year first (about a microsecond).
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta

_MONTHS = {name.casefold(): n for n, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.casefold(): n for n, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_DATE = re.compile(
    rf"\b{_DAY}\s+(?:of\s+)?(?P<m1>{_MONTH})\.?,?\s+{_YEAR}\b"  # 9 November, 2022
    rf"|\b(?P<m2>{_MONTH})\.?\s+{_DAY},?\s+{_YEAR}\b"  # October 13, 2023
    rf"|\b(?P<m3>{_MONTH})\.?,?\s+{_YEAR}\b"  # May 2023
    rf"|\b{_YEAR}\b",  # 2023
    re.IGNORECASE,
)
_YEAR_ANYWHERE = re.compile(r"(?:19|20)\d\d")  # each form has a year: a cheap first look

DAYS_BEFORE = 1
"""A memory stored up to this many days before a named day counts as from that day: the
stored day is UTC's, the named one the user's."""
DAYS_AFTER = 3
"""A memory stored up to this many days after a named day counts as from that day: people
tell about a day on it or in the days after."""


def named_days(text: str) -> list[tuple[date, date]]:
    """The spans of days ``text`` names, first and last day inclusive, in order of mention:
    a date is one day, a month its days, a year its days. Impossible dates are skipped."""
    if not _YEAR_ANYWHERE.search(text):
        return []
    spans = []
    for m in _DATE.finditer(text):
        g = m.groups()
        try:
            if m.group("m1"):
                first = last = date(int(g[2]), _MONTHS[g[1].casefold()], int(g[0]))
            elif m.group("m2"):
                first = last = date(int(g[5]), _MONTHS[g[3].casefold()], int(g[4]))
            elif m.group("m3"):
                year, month = int(g[7]), _MONTHS[g[6].casefold()]
                first = date(year, month, 1)
                last = date(year, month, calendar.monthrange(year, month)[1])
            else:
                year = int(g[8])
                first, last = date(year, 1, 1), date(year, 12, 31)
        except ValueError:  # 31 February
            continue
        spans.append((first, last))
    return spans


def stored_spans(text: str) -> list[tuple[date, date]]:
    """:func:`named_days` widened to the days a memory about them may have been stored:
    ``DAYS_BEFORE`` before each span and ``DAYS_AFTER`` after it."""
    before, after = timedelta(days=DAYS_BEFORE), timedelta(days=DAYS_AFTER)
    return [(first - before, last + after) for first, last in named_days(text)]
