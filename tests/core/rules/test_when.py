"""The days a message names (core.rules.when): the forms recall reads, and what it leaves."""

from __future__ import annotations

from datetime import date

from core.rules.when import DAYS_AFTER, DAYS_BEFORE, named_days, stored_spans


def test_named_days_reads_dates_months_and_years() -> None:
    nov9 = date(2022, 11, 9)
    assert named_days("What dish did Nate make on 9 November, 2022?") == [(nov9, nov9)]
    assert named_days("on 9th of Nov 2022") == [(nov9, nov9)]
    assert named_days("What did she show me on October 13, 2023?") == [
        (date(2023, 10, 13), date(2023, 10, 13))
    ]
    assert named_days("What did I start in Feb. 2024?") == [(date(2024, 2, 1), date(2024, 2, 29))]
    assert named_days("trips in 2021 and Sept 2023") == [
        (date(2021, 1, 1), date(2021, 12, 31)),
        (date(2023, 9, 1), date(2023, 9, 30)),
    ]


def test_named_days_leaves_what_is_not_a_whole_date() -> None:
    for text in (
        "How do I set up an nginx reverse proxy?",
        "on 9 November",  # no year: which one?
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
