"""The LoCoMo loader for benchmarks and the benchmarks' default data folder.

LoCoMo: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024 (https://github.com/snap-research/locomo), licensed CC BY-NC 4.0. The data is read
from a folder (default ``../shared/data/locomo`` from the repository root, or a bench's
``--data DIR``) and never copied into this repository. File shape:
``../shared/data/locomo/README.md``. The parser lives in :mod:`core.evaluation.locomo`, which
``selfmind eval reflection`` uses too; without the data a bench ends with one line and exit 1
(:class:`LoCoMoMissing`).
"""

from __future__ import annotations

from pathlib import Path

from core.evaluation import locomo as _locomo
from core.evaluation.locomo import (
    Conversation,
    Observation,
    Question,
    Session,
    Turn,
    load_conversation,
    parse_date,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo"
SOURCE = "LoCoMo (Maharana et al. 2024, https://github.com/snap-research/locomo, CC BY-NC 4.0)"

__all__ = [
    "DEFAULT_DATA",
    "REPO_ROOT",
    "SOURCE",
    "Conversation",
    "LoCoMoMissing",
    "Observation",
    "Question",
    "Session",
    "Turn",
    "load_all",
    "load_conversation",
    "parse_date",
]


class LoCoMoMissing(SystemExit):
    """No LoCoMo conversations where a bench looked: uncaught, the bench exits 1 printing
    one line (what is missing, where it comes from, and the ``--data`` flag)."""

    def __init__(self, data: Path, names: list[str] | None = None) -> None:
        wanted = f" ({', '.join(names)})" if names else ""
        super().__init__(
            f"error: no LoCoMo conversations{wanted} in {data}: get {SOURCE}"
            f" into {DEFAULT_DATA} or pass --data DIR"
        )


def load_all(data: Path = DEFAULT_DATA, names: list[str] | None = None) -> list[Conversation]:
    """Every conversation in ``data`` (or those named), in name order; :class:`LoCoMoMissing`
    when there are none."""
    try:
        conversations = _locomo.load_all(data, names)
    except FileNotFoundError:
        raise LoCoMoMissing(data, names) from None
    if not conversations:
        raise LoCoMoMissing(data, names)
    return conversations
