"""The LoCoMo loader for benchmarks (it lives in :mod:`core.evaluation.locomo`, which
``selfmind eval reflection`` uses too) and the benchmarks' default data folder."""

from __future__ import annotations

from pathlib import Path

from core.evaluation.locomo import (
    Conversation,
    Observation,
    Question,
    Session,
    Turn,
    load_all,
    load_conversation,
    parse_date,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo"

__all__ = [
    "DEFAULT_DATA",
    "REPO_ROOT",
    "Conversation",
    "Observation",
    "Question",
    "Session",
    "Turn",
    "load_all",
    "load_conversation",
    "parse_date",
]
