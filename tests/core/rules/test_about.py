"""Whose fact it is (core.rules.about): the offline rule on the forms it reads, and its
accuracy on the labelled cases (core/data/about_cases.jsonl), the held-out third apart."""

from __future__ import annotations

from collections import Counter

import pytest

from core.evaluation.about import evaluate, format_table, load_cases
from core.rules.about import Whose, whose


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (
            "my manager prefers short emails",
            Whose("The user's manager prefers short emails.", "the user's manager"),
        ),
        (
            "Sarah on my team is vegetarian",
            Whose("Sarah, on the user's team, is vegetarian.", "Sarah"),
        ),
        (
            "my manager Sarah prefers short emails",
            Whose("The user's manager, Sarah, prefers short emails.", "Sarah"),
        ),
        (
            "My manager asked me to ship by Friday",
            Whose("The user's manager asked the user to ship by Friday.", "the user's manager"),
        ),
        ("I prefer tabs over spaces", Whose("The user prefers tabs over spaces.")),
        ("my dog is called Rex", Whose("The user's dog is called Rex.")),
        ("my team deploys on Fridays", Whose("The user's team deploys on Fridays.")),
        ("my partner and I live in Porto", Whose("my partner and I live in Porto")),
        ('Tom told me "I prefer Vim"', Whose('Tom told the user "I prefer Vim".', "Tom")),
        (
            "I'd like answers in English if possible",
            Whose("The user would like answers in English if possible."),
        ),
        ("if I ask for code, answer in Python", Whose("if I ask for code, answer in Python")),
        (
            "if I had a dog I would call it Rex",
            Whose("if I had a dog I would call it Rex", None, False),
        ),
        ("suppose I moved to Berlin", Whose("suppose I moved to Berlin", None, False)),
    ],
)
def test_whose(typed: str, expected: Whose) -> None:
    assert whose(typed) == expected


@pytest.mark.parametrize("text", ["", "   ", "\u202e", "x" * 5000, "🙂 my 🙂", "My"])
def test_whose_takes_any_text(text: str) -> None:
    found = whose(text)
    assert isinstance(found.text, str) and found.fact


def test_the_labelled_set_has_every_kind_and_a_held_out_third() -> None:
    cases = load_cases()
    assert len(cases) >= 80
    assert len({c.id for c in cases}) == len(cases)
    splits = Counter(c.split for c in cases)
    assert set(splits) == {"tune", "holdout"}
    assert 0.3 <= splits["holdout"] / len(cases) <= 0.36
    kinds = Counter(c.case for c in cases)
    for kind in ("manager", "partner", "child", "colleague", "customer", "team", "quoted"):
        assert kinds[kind] >= 6, kind
    assert kinds["hypothetical"] >= 8
    assert all(c.fact is False for c in cases if c.case == "hypothetical")


def test_the_offline_rule_on_the_labelled_set() -> None:
    report = evaluate(load_cases())
    assert report["holdout"]["n"] >= 30
    # Measured: 1.000 on both splits (python bench/about.py); a change that costs a case
    # shows here.
    assert report["tune"]["right"] == 1.0, report["tune"]["wrong"]
    assert report["holdout"]["right"] == 1.0, report["holdout"]["wrong"]
    assert "holdout" in format_table(report)
