"""The days a message names (core.rules.when): the forms recall reads, and what it leaves."""

from __future__ import annotations

from datetime import date

import pytest

from core.rules.when import DAYS_AFTER, DAYS_BEFORE, Dated, as_past, dated, named_days, stored_spans


def test_named_days_reads_dates_and_months() -> None:
    nov9 = date(2022, 11, 9)
    assert named_days("What dish did Nate make on 9 November, 2022?") == [(nov9, nov9)]
    assert named_days("on 9th of Nov 2022") == [(nov9, nov9)]
    assert named_days("What did she show me on October 13, 2023?") == [
        (date(2023, 10, 13), date(2023, 10, 13))
    ]
    assert named_days("What did I start in Feb. 2024?") == [(date(2024, 2, 1), date(2024, 2, 29))]
    assert named_days("trips in 2021 and Sept 2023") == [(date(2023, 9, 1), date(2023, 9, 30))]


def test_named_days_leaves_what_is_not_a_whole_date() -> None:
    for text in (
        "How do I set up an nginx reverse proxy?",
        "on 9 November",  # no year: which one?
        "Which laptop should I buy in 2026?",  # a year alone: most memories are from it
        "last week",
        "Python 3.11 on port 8080",
        "31 February 2023",  # no such day
        "May I have a snack?",
    ):
        assert named_days(text) == [], text


def test_stored_spans_widen_each_span() -> None:
    ((first, last),) = stored_spans("on 9 November 2022")
    assert (date(2022, 11, 9) - first).days == DAYS_BEFORE
    assert (last - date(2022, 11, 9)).days == DAYS_AFTER


SAT = date(2026, 12, 5)  # a Saturday


@pytest.mark.parametrize(
    ("text", "stored", "first", "last"),
    [
        (
            "The user is travelling to Singapore next week.",
            "The user is travelling to Singapore in the week of 2026-12-07 to 2026-12-13.",
            date(2026, 12, 7),
            date(2026, 12, 13),
        ),
        (
            "The user has a dentist appointment tomorrow.",
            "The user has a dentist appointment on 2026-12-06.",
            date(2026, 12, 6),
            date(2026, 12, 6),
        ),
        (
            "The user is in Singapore from 10 to 14 December.",
            "The user is in Singapore from 2026-12-10 to 2026-12-14.",
            date(2026, 12, 10),
            date(2026, 12, 14),
        ),
        (
            "The user is on leave until 14 January.",
            "The user is on leave until 2027-01-14.",
            None,
            date(2027, 1, 14),
        ),
        ("The report is due Friday.", "The report is due 2026-12-11.", None, date(2026, 12, 11)),
        (
            "The user is on call from tomorrow until next Friday.",
            "The user is on call from 2026-12-06 to 2026-12-11.",
            date(2026, 12, 6),
            date(2026, 12, 11),
        ),
        (
            "The user is starting at Google next month.",
            "The user is starting at Google in January 2027.",
            date(2027, 1, 1),
            None,
        ),
        (
            "The user is on leave until March 2027.",
            "The user is on leave until March 2027.",
            None,
            date(2027, 2, 28),
        ),
        # Past events are facts (written out when relative), recurring days no dates.
        (
            "The user had a migraine yesterday.",
            "The user had a migraine on 2026-12-04.",
            None,
            None,
        ),
        (
            "The user moved to Berlin in May 2023.",
            "The user moved to Berlin in May 2023.",
            None,
            None,
        ),
        ("The user has yoga every Monday.", "The user has yoga every Monday.", None, None),
        ("The user's standup is on Monday.", "The user's standup is on Monday.", None, None),
        (
            "The user prefers today's date in ISO format.",
            "The user prefers today's date in ISO format.",
            None,
            None,
        ),
        ("The user uses Python 3.12 at work.", "The user uses Python 3.12 at work.", None, None),
        (
            "The user's birthday is on 3 March.",
            "The user's birthday is on 3 March.",
            None,
            None,
        ),
        (
            "The user's wedding anniversary is tomorrow.",
            "The user's wedding anniversary is on 6 December.",
            None,
            None,
        ),
        (
            "The user is in Lisbon for next month.",
            "The user is in Lisbon for January 2027.",
            date(2027, 1, 1),
            date(2027, 1, 31),
        ),
        (
            "The user was born on 31 February 1990.",
            "The user was born on 31 February 1990.",
            None,
            None,
        ),
    ],
)
def test_dated(text: str, stored: str, first: date | None, last: date | None) -> None:
    assert dated(text, SAT) == Dated(stored, first, last)


@pytest.mark.parametrize("text", ["", "next", "\x00 tomorrow \u202e", "in 999 weeks", "x" * 5000])
def test_dated_takes_any_text(text: str) -> None:
    assert isinstance(dated(text, SAT).text, str)


def test_as_past() -> None:
    assert (
        as_past("The user is travelling to Singapore.") == "The user was travelling to Singapore."
    )
    assert as_past("The user's kids have a recital.") == "The user's kids had a recital."
    assert as_past("The user travels.") == "The user travels."
