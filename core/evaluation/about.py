"""Whose fact it is, measured on labelled cases: the offline rule's accuracy per split.

The cases ship inside the package (``core/data/about_cases.jsonl``, one JSON object a line):
``id``; ``split`` = ``tune`` | ``holdout`` (a third, not used to write the rule); ``case``
(manager, partner, child, colleague, customer, team, quoted, hypothetical, other, self,
conditional); ``typed`` (what the user gave ``/remember``); ``fact`` (False: a hypothetical,
nothing to store); ``about`` (None: the user; else the person as the stored text names
them); ``text`` (the text as it should be stored; None where only whose it is is judged).

A case is **right** when :func:`core.rules.about.whose` gives the same ``fact`` and, for a
fact, the same ``about`` (case-insensitive), and the same ``text`` where one is labelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from core.rules.about import same_person, whose

CASES_FILE = "data/about_cases.jsonl"  # inside the ``core`` package
SPLITS: tuple[str, ...] = ("tune", "holdout", "all")


@dataclass(frozen=True, slots=True)
class AboutCase:
    """One labelled case (see the module)."""

    id: int
    split: str
    case: str
    typed: str
    fact: bool
    about: str | None
    text: str | None


def load_cases() -> list[AboutCase]:
    """The labelled cases shipped with :mod:`core`."""
    raw = resources.files("core").joinpath(CASES_FILE).read_text(encoding="utf-8")
    return [AboutCase(**json.loads(line)) for line in raw.splitlines() if line.strip()]


def judge(case: AboutCase) -> tuple[bool, bool]:
    """``(whose right, text right)`` of the offline rule on ``case``."""
    got = whose(case.typed)
    who = got.fact == case.fact and (not case.fact or same_person(got.about, case.about))
    return who, case.text is None or got.text == case.text


def evaluate(cases: list[AboutCase]) -> dict[str, Any]:
    """Per split (``tune``, ``holdout``, ``all``) and per case kind: ``n``, ``whose`` (share
    right on fact and about), ``text`` (share of labelled texts written right), ``right``
    (both), and the ids of the wrong ones."""
    out: dict[str, Any] = {}
    judged = [(c, *judge(c)) for c in cases]
    groups: dict[str, list[tuple[AboutCase, bool, bool]]] = {s: [] for s in SPLITS}
    for item in judged:
        groups[item[0].split].append(item)
        groups["all"].append(item)
        groups.setdefault(f"case:{item[0].case}", []).append(item)
    for name, items in groups.items():
        n = len(items)
        out[name] = {
            "n": n,
            "whose": round(sum(w for _, w, _ in items) / n, 3) if n else None,
            "text": round(sum(t for _, _, t in items) / n, 3) if n else None,
            "right": round(sum(w and t for _, w, t in items) / n, 3) if n else None,
            "wrong": [c.id for c, w, t in items if not (w and t)],
        }
    return out


def format_table(report: dict[str, Any]) -> str:
    """The report as a text table, one row per split and case kind."""
    lines = [f"{'':<22}{'n':>4}{'whose':>8}{'text':>8}{'both':>8}  wrong"]
    for name, row in report.items():
        lines.append(
            f"{name:<22}{row['n']:>4}{row['whose']:>8.3f}{row['text']:>8.3f}{row['right']:>8.3f}"
            f"  {','.join(map(str, row['wrong'])) or '-'}"
        )
    return "\n".join(lines)
