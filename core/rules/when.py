"""The days a message names: "on 9 November, 2022", "October 13, 2023", "in May 2023".

Recall puts the memories stored on the named days first (:mod:`core.memory.hybrid`): a memory
keeps the day it was stored (``created_at``), and a question that names a day ("What did I
cook on 9 November?") asks about what the user said around then, words that the memory itself
seldom holds. :func:`named_days` reads absolute English dates only (day month year, month day
year, month year; month names in full or in three letters); a day with no year ("on 9
November"), a year alone ("a laptop for 2026": most of an active user's memories are from
this year, and putting all of them first would push the relevant older ones out; on LoCoMo
it changed no hit) or a relative one ("last week") names nothing here. Pure and cheap: the
message is searched for a four-digit year first (about a microsecond).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
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
    rf"|\b(?P<m3>{_MONTH})\.?,?\s+{_YEAR}\b",  # May 2023
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
    a date is one day, a month its days. Impossible dates are skipped."""
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
            else:
                year, month = int(g[7]), _MONTHS[g[6].casefold()]
                first = date(year, month, 1)
                last = date(year, month, calendar.monthrange(year, month)[1])
        except ValueError:  # 31 February
            continue
        spans.append((first, last))
    return spans


def stored_spans(text: str) -> list[tuple[date, date]]:
    """:func:`named_days` widened to the days a memory about them may have been stored:
    ``DAYS_BEFORE`` before each span and ``DAYS_AFTER`` after it."""
    before, after = timedelta(days=DAYS_BEFORE), timedelta(days=DAYS_AFTER)
    return [(first - before, last + after) for first, last in named_days(text)]


# ---------------------------------------------------------------- the days a memory holds
# What follows dates a memory (``/remember``'s offline rule, :func:`dated`): a relative
# expression is resolved against the day the message was sent and written as absolute ISO
# days, and a plan or a temporary state gets the days it holds (``valid_from`` /
# ``valid_until``, :class:`core.types.Memory`).

_WEEKDAYS = {name.casefold(): n for n, name in enumerate(calendar.day_name)}
_WEEKDAY = "|".join(_WEEKDAYS)
_D = r"(\d{1,2})(?:st|nd|rd|th)?(?!\d)"
_Y = r"(?:,?\s+((?:19|20)\d\d))?"
_EXPR = re.compile(
    r"(?P<rel>the day after tomorrow|next week|this week|next weekend|this weekend|"
    r"next month|this month|tomorrow|today|tonight|yesterday)\b(?!['’]s)"
    rf"|(?P<wd>(?:(?:next|this|coming|on)\s+|(?<=by )|(?<=due )|(?<=until )|(?<=till )"
    rf"|(?<=before ))(?:{_WEEKDAY}))\b(?!s)"
    r"|in\s+(?P<n>\d{1,3}|a|one|two|three|four)\s+(?P<unit>days?|weeks?)\b"
    r"|(?P<iso>\d{4}-\d{2}-\d{2})\b"
    rf"|(?P<my>{_MONTH})\s+(?P<myy>(?:19|20)\d\d)\b"
    rf"|(?P<rdm>{_D}\s*(?:-|–|to)\s*{_D}\s+({_MONTH}){_Y})\b"
    rf"|(?P<dm>{_D}\s+(?:of\s+)?({_MONTH}){_Y})\b"
    rf"|(?P<md>({_MONTH})\s+{_D}{_Y})\b",
    re.IGNORECASE,
)
_UNTIL = re.compile(r"(?:until|till|through|by|before|due)\s+(?:on\s+|the\s+)?$", re.IGNORECASE)
_FROM = re.compile(r"(?:from|between)\s+$", re.IGNORECASE)
_TO = re.compile(r"^\s*(?:to|until|till|through|and|-|–)\s+", re.IGNORECASE)
_STARTS = re.compile(
    r"\b(start\w*|begin\w*|began|join\w*|mov(?:e|es|ing)|relocat\w*|switch\w*|from now on)\b",
    re.IGNORECASE,
)
# What every match of ``_EXPR`` holds (a digit, a day, week or month word, a month's name):
# a cheap first look (``_EXPR.search`` costs about 150 us on a sentence; the nightly
# consolidation reads every memory of a user).
_MAYBE_DATED = re.compile(
    r"\d|day|week|month|tonight|tomorrow|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec",
    re.IGNORECASE,
)
_NUMBERS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4}
# "on Monday" names a day only in a plan ("is presenting on Monday", "has a dentist
# appointment on Friday", "will ..."); else it is a habit ("the standup is on Monday").
_PLAN = re.compile(
    r"\b(?:is|are|am)\s+\w+ing\b|\b(?:will|going to|has an?|have an?|appointment|due)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Dated:
    """A memory's text with every relative date made absolute, and the days it holds
    (either or both None: no bound)."""

    text: str
    valid_from: date | None = None
    valid_until: date | None = None


def _next_on_or_after(today: date, month: int, day: int) -> date:
    """The ``day`` of ``month`` on or after ``today`` (this year's, else next year's)."""
    this = date(today.year, month, day) if _valid(today.year, month, day) else None
    if this is not None and this >= today:
        return this
    return date(today.year + 1, month, day)


def _valid(year: int, month: int, day: int) -> bool:
    return 1 <= day <= calendar.monthrange(year, month)[1]


def _month_of(first: date) -> tuple[date, date]:
    return first, first.replace(day=calendar.monthrange(first.year, first.month)[1])


def _span(m: re.Match[str], today: date) -> tuple[date, date, str | None] | None:
    """The first and last day ``m`` names, and how to say it when it was relative (None:
    absolute, the text keeps it)."""
    monday = today - timedelta(days=today.weekday())
    rel = (m.group("rel") or "").casefold()
    if rel:
        shift = {"today": 0, "tonight": 0, "tomorrow": 1, "the day after tomorrow": 2}
        shift["yesterday"] = -1
        if rel in shift:
            day = today + timedelta(days=shift[rel])
            return day, day, f"on {day}"
        if rel.endswith("weekend"):
            start = monday + timedelta(days=5 if rel.startswith("this") else 12)
            return max(today, start), start + timedelta(days=1), f"on the weekend of {start}"
        if rel.endswith("week"):
            start = monday + timedelta(days=0 if rel.startswith("this") else 7)
            end = start + timedelta(days=6)
            return max(today, start), end, f"in the week of {start} to {end}"
        first = date(today.year, today.month, 1)
        if rel == "next month":
            first = (first + timedelta(days=32)).replace(day=1)
        first, last = _month_of(first)
        return max(today, first), last, f"in {calendar.month_name[first.month]} {first.year}"
    if m.group("wd"):
        target = _WEEKDAYS[m.group("wd").split()[-1].casefold()]
        day = today + timedelta(days=(target - today.weekday()) % 7 or 7)
        return day, day, f"on {day}"
    if m.group("n"):
        n = _NUMBERS.get(m.group("n").casefold()) or int(m.group("n"))
        day = today + timedelta(days=n * (7 if m.group("unit").casefold().startswith("w") else 1))
        return day, day, f"on {day}"
    g = m.groups()
    try:
        if m.group("iso"):
            iso = date.fromisoformat(m.group("iso"))
            return iso, iso, None
        if m.group("my"):
            first, last = _month_of(date(int(m.group("myy")), _MONTHS[m.group("my").casefold()], 1))
            return first, last, None
        if m.group("rdm"):
            i = m.re.groupindex["rdm"]
            d1, d2, mon, year = int(g[i]), int(g[i + 1]), _MONTHS[g[i + 2].casefold()], g[i + 3]
            first = date(int(year), mon, d1) if year else _next_on_or_after(today, mon, d1)
            last = first.replace(day=d2)
            if last < first:
                return None
            return first, last, None if year else f"from {first} to {last}"
        for name, day_at, month_at in (("dm", 0, 1), ("md", 1, 0)):
            if m.group(name):
                i = m.re.groupindex[name]
                parts = g[i : i + 3]
                day_n, mon = int(parts[day_at]), _MONTHS[parts[month_at].casefold()]
                if parts[2]:
                    one = date(int(parts[2]), mon, day_n)
                    return one, one, None
                one = _next_on_or_after(today, mon, day_n)
                return one, one, f"on {one}"
    except ValueError:  # 31 February
        return None
    return None


def dated(text: str, today: date) -> Dated:
    """``text`` with its relative dates resolved against ``today`` (the day the message was
    sent), and the days it holds.

    "The user is travelling to Singapore next week." sent on Saturday 2026-12-05 ->
    "The user is travelling to Singapore from 2026-12-07 to 2026-12-13.", valid 2026-12-07
    to 2026-12-13. Read: today, tonight, tomorrow, yesterday, this/next week, weekend and
    month, next/this/coming/on + a weekday (the next one after today), "in N days/weeks",
    ISO days, "10 December", "December 10", "10-14 December" (the next such day when no
    year is given), "May 2027". The first date named decides: after "until", "till",
    "through", "by", "before" or "due" it is the last day only (a deadline, "on leave until
    14 January"); "from A to B" holds A's first day to B's last; the start of a lasting
    state ("starting", "joins", "moving", "from now on") holds from its day with no end.
    A date wholly before ``today`` dates nothing (a past event stays a fact: "moved to
    Berlin in May 2023"), though a relative one is still written out ("yesterday" ->
    "on 2026-12-04"). Recurring days ("every Monday", "on Mondays", and "on Monday" outside
    a plan: "the standup is on Monday") are not dates; "today's" is not today. A day of
    every year (a birthday, an anniversary) holds no dates: "my birthday is on 3 March"
    stays so, "tomorrow" becomes "on 6 December".
    """
    m = _EXPR.search(text) if _MAYBE_DATED.search(text) else None
    if m is None:
        return Dated(text)
    if (m.group("wd") or "").casefold().startswith("on ") and not _PLAN.search(text):
        return Dated(text)
    span = _span(m, today)
    if span is None:
        return Dated(text)
    first, last, said = span
    if _YEARLY.search(text):  # a birthday, an anniversary: a day of every year, no validity
        return Dated(_yearly(text, m, first, last, said))
    start, end = m.start(), m.end()
    before = text[:start]
    to = _TO.match(text[end:]) if not m.group("rdm") else None
    second = _EXPR.match(text, end + to.end()) if to else None
    second_span = _span(second, today) if second else None
    if second is not None and second_span is not None and second_span[1] >= first:
        last, end = second_span[1], second.end()
        if said or second_span[2]:
            said = f"{first} to {last}" if _FROM.search(before) else f"from {first} to {last}"
    valid_from: date | None = first
    valid_until: date | None = last
    lead = _UNTIL.search(before)
    if lead and second_span is None:
        valid_from = None
        if lead.group(0).split()[0].casefold() == "before" or (
            m.group("my") and lead.group(0).split()[0].casefold() in ("until", "till")
        ):
            valid_until = first - timedelta(days=1)  # until March: up to its first day
        if said:
            said = said.removeprefix("on ")
    elif _STARTS.search(text):
        valid_until = None
    if said:
        if said.startswith("on ") and re.search(r"\b(on|the)\s+$", before, re.IGNORECASE):
            said = said.removeprefix("on ")
        if said.startswith("from ") and _FROM.search(before):
            said = said.removeprefix("from ")
        if said.startswith("in ") and re.search(r"\bfor\s+$", before, re.IGNORECASE):
            said = said.removeprefix("in ")  # "for next month" -> "for January 2027"
        text = f"{before}{said}{text[end:]}"
    if (valid_until is not None and valid_until < today) or (
        valid_until is None and valid_from is not None and valid_from < today
    ):
        return Dated(text)  # a past event: a fact, not a state with days
    return Dated(text, valid_from, valid_until)


def _yearly(text: str, m: re.Match[str], first: date, last: date, said: str | None) -> str:
    """``text`` naming a day of every year: a relative day written as its day and month
    ("The user's birthday is tomorrow." -> "... is on 6 December."), any other date as
    written (never a year it does not say)."""
    if said is None or first != last:
        return text
    day = f"{first.day} {calendar.month_name[first.month]}"
    before = text[: m.start()]
    if not re.search(r"\b(on|the)\s+$", before, re.IGNORECASE):
        day = f"on {day}"
    return f"{before}{day}{text[m.end() :]}"


_PRESENT = re.compile(r"\b(is|are|has|have|will be|will|plans to|intends to)\b")
_PAST_OF = {
    "is": "was",
    "are": "were",
    "has": "had",
    "have": "had",
    "will be": "was to be",
    "will": "was to",
    "plans to": "planned to",
    "intends to": "intended to",
}


def as_past(text: str) -> str:
    """``text`` told as past: its first present-tense verb ("is", "are", "has", "will",
    "plans to") made past ("The user is travelling to Singapore ..." -> "The user was
    travelling to Singapore ..."); text with none of them is returned as is (the caller
    marks it past otherwise); text already told as past (:func:`told_as_past`) is returned
    as is."""
    if told_as_past(text):
        return text
    return _PRESENT.sub(lambda m: _PAST_OF[m.group(1)], text, count=1)


_PAST_VERB = re.compile(r"\b(was|were|had|planned to|intended to)\b")
_YEARLY = re.compile(r"\b(birthdays?|anniversar(?:y|ies)|born|annual(?:ly)?|yearly)\b", re.I)


# The verb right after "the user" (or "the user's team") in the simple past: "The user led
# the platform team ...", "The user finished ...".
_USER_PAST = re.compile(
    r"\buser(?:['’]s \w+)? (?:\w+ly )?(?:\w+(?<!e)ed|led|went|left|ran|took|made|met|flew|drove"
    r"|spent|kept|held|gave|came|saw|did)\b",
    re.IGNORECASE,
)


def told_as_past(text: str) -> bool:
    """True when ``text``'s first verb is already past: one :func:`as_past` knows ("The user
    was travelling ...", "The user had a dentist appointment ...") or the simple past right
    after "the user" ("The user led the platform team until ...")."""
    present = _PRESENT.search(text)
    for past in (_PAST_VERB.search(text), _USER_PAST.search(text)):
        if past is not None and (present is None or past.start() < present.start()):
            return True
    return False


def ended(
    text: str, *, valid_from: date | None, valid_until: date | None, stored: date, today: date
) -> Dated | None:
    """What consolidation's "end dated facts" makes of one stored memory on ``today``
    (:mod:`core.memory.consolidation`), or None when nothing changes:

    - **undated** (no ``valid_from`` nor ``valid_until``) but its text names when it ends,
      read by :func:`dated` against ``stored`` (the day it was stored, when its "next week"
      was said): it gets those days and the text they were written out in ("The user is
      travelling to Singapore next week." stored 2026-11-02 -> "... in the week of
      2026-11-09 to 2026-11-15.", valid to 2026-11-15). A yearly day (a birthday, an
      anniversary, "born") ends nothing, nor a start with no end ("starting next month"),
      nor an event told as past ("was finished on ...") or, without a present-tense verb,
      on the day it was stored ("finished the marathon on 2026-11-02");
    - **past** (its last day before ``today``, given now or before) and told in the present:
      told as past (:func:`as_past`: "The user was travelling ..."), its days kept, so that
      the stored sentence stays true (a later "The user is on leave." is a new fact, not a
      duplicate of an ended leave). A text :func:`as_past` cannot tell as past keeps its
      words (listings prefix "Until <day>:").
    """
    changed = False
    if valid_from is None and valid_until is None:
        if told_as_past(text) or _YEARLY.search(text):
            return None
        found = dated(text, stored)
        if found.valid_until is None or (found.valid_until <= stored and not _PRESENT.search(text)):
            return None  # no end, or an event of the day it was told ("finished on ...")
        text, valid_from, valid_until, changed = (
            found.text,
            found.valid_from,
            found.valid_until,
            True,
        )
    if valid_until is not None and valid_until < today and not told_as_past(text):
        told = as_past(text)
        changed = changed or told != text
        text = told
    return Dated(text, valid_from, valid_until) if changed else None
