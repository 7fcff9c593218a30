"""The negative and correction suites shipped in ``core/data/eval/`` (JSON Lines).

``negative.jsonl``: ``{"id", "category", "user", "assistant"}``: short exchanges written for
this project, each of which must leave no memory behind (greetings and thanks, moods, one-off
task details, options discussed but not chosen, the assistant's suggestions, hypotheticals
and questions, another person's words quoted in a shared thread, jokes).

``corrections.jsonl``: ``{"id", "seed", "user", "assistant", "expected"}``: ``seed`` is stored
first (as ``/remember`` would), then the exchange is reflected; it passes when the seed is
superseded by a new active memory. ``expected`` is the memory a good reflection writes (used
by the tests' scripted models; the score does not compare texts). Each user message shares a
word with its seed, as corrections usually do: reflection only sees the stored memories
recall finds for the exchange, so a seed recall cannot find cannot be superseded.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class NegativeCase:
    """An exchange that must store nothing."""

    id: str
    category: str
    user: str
    assistant: str


@dataclass(frozen=True)
class CorrectionCase:
    """An exchange that must supersede ``seed``."""

    id: str
    seed: str
    user: str
    assistant: str
    expected: str


def _lines(name: str) -> list[dict[str, str]]:
    text = resources.files("core").joinpath(f"data/eval/{name}").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@functools.cache
def negative_cases() -> tuple[NegativeCase, ...]:
    """The negative suite, in file order."""
    return tuple(NegativeCase(**row) for row in _lines("negative.jsonl"))


@functools.cache
def correction_cases() -> tuple[CorrectionCase, ...]:
    """The correction suite, in file order."""
    return tuple(CorrectionCase(**row) for row in _lines("corrections.jsonl"))
