"""Dedupe: exact after normalisation, Jaccard >= threshold, new information never merged."""

from __future__ import annotations

import pytest

from core.dedupe import Deduper, carries_new_information, jaccard
from core.models import Memory, utcnow
from core.text import normalize, words


def mem(text: str, memory_id: int = 1) -> Memory:
    now = utcnow()
    return Memory(memory_id, "cli:a", text, "fact", "general", "remember", "private", now, now)


@pytest.mark.parametrize(
    ("candidate", "known", "duplicate"),
    [
        ("The user is allergic to peanuts.", "The user is not allergic to peanuts.", False),
        ("The user's daughter is 7 years old.", "The user's daughter is 8 years old.", False),
        ("The user prefers tabs over spaces.", "the user prefers tabs over spaces", True),
        (
            "The user prefers dark mode in every editor.",
            "The user prefers dark mode in every code editor.",
            True,
        ),
        ("The user lives in Paris.", "The user lives in Berlin.", False),
        ("The user works with Alice on the API.", "The user works with Bob on the API.", False),
        ("The user moved on March 3.", "The user moved on April 3.", False),
        ("The user never drinks coffee at work.", "The user drinks coffee at work.", False),
        ("  The   user prefers VIM!  ", "the user prefers vim", True),
    ],
)
def test_dedupe_cases(candidate: str, known: str, duplicate: bool) -> None:
    assert (Deduper(0.7).match(candidate, [mem(known)]) is not None) is duplicate


def test_peanut_pair_is_above_threshold_yet_new() -> None:
    a, b = "The user is allergic to peanuts.", "The user is not allergic to peanuts."
    assert jaccard(set(words(a)), set(words(b))) == pytest.approx(6 / 7)
    assert carries_new_information(a, b)


def test_best_match_is_returned() -> None:
    known = [
        mem("The user prefers dark mode in every code editor and terminal.", 1),
        mem("The user prefers dark mode in every code editor.", 2),
    ]
    found = Deduper(0.7).match("The user prefers dark mode in every editor.", known)
    assert found is not None and found.id == 2


def test_threshold_is_respected() -> None:
    a, b = "The user likes green tea.", "The user likes green tea in winter mornings."
    assert Deduper(0.9).match(a, [mem(b)]) is None
    assert jaccard(set(words(a)), set(words(b))) < 0.9


def test_normalize() -> None:
    assert normalize("  Hello\tWORLD. ") == "hello world"
    assert normalize("Ｆｕｌｌ width") == "full width"
