"""Loading the LoCoMo conversations (ACL 2024, snap-research/locomo; CC BY-NC 4.0).

LoCoMo: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024 (https://github.com/snap-research/locomo), licensed CC BY-NC 4.0. The data is read
from a folder (default ``../shared/data/locomo`` from the repository root, or a bench's
``--data DIR``) and never copied into this repository. File shape:
``../shared/data/locomo/README.md``. Without it a bench ends with one line and exit 1
(:class:`LoCoMoMissing`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo"
SOURCE = "LoCoMo (Maharana et al. 2024, https://github.com/snap-research/locomo, CC BY-NC 4.0)"


class LoCoMoMissing(SystemExit):
    """No LoCoMo conversations where a bench looked: uncaught, the bench exits 1 printing
    one line (what is missing, where it comes from, and the ``--data`` flag)."""

    def __init__(self, data: Path, names: list[str] | None = None) -> None:
        wanted = f" ({', '.join(names)})" if names else ""
        super().__init__(
            f"error: no LoCoMo conversations{wanted} in {data}: get {SOURCE}"
            f" into {DEFAULT_DATA} or pass --data DIR"
        )


_DIA = re.compile(r"D\d+:\d+")
_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Turn:
    speaker: str
    dia_id: str
    text: str


@dataclass(frozen=True)
class Session:
    number: int
    date: datetime
    turns: list[Turn]


@dataclass(frozen=True)
class Observation:
    speaker: str  # the speaker the fact is listed under
    text: str
    evidence: frozenset[str]  # dia_ids it cites


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Conversation:
    name: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session] = field(default_factory=list)
    observations: dict[int, list[Observation]] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)

    def all_observations(self) -> Iterator[Observation]:
        for number in sorted(self.observations):
            yield from self.observations[number]

    def speaker_of(self, dia_id: str) -> str | None:
        for session in self.sessions:
            for turn in session.turns:
                if turn.dia_id == dia_id:
                    return turn.speaker
        return None


def parse_date(value: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> a naive datetime."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y")


def _ids(value: object) -> frozenset[str]:
    if isinstance(value, list):
        return frozenset(i for v in value for i in _DIA.findall(str(v)))
    return frozenset(_DIA.findall(str(value)))


def load_conversation(path: Path) -> Conversation:
    raw = json.loads(path.read_text(encoding="utf-8"))
    conv = Conversation(name=path.stem, speaker_a=raw["speaker_a"], speaker_b=raw["speaker_b"])
    numbers = sorted(
        int(m.group(1)) for k in raw if (m := _SESSION.fullmatch(k)) and isinstance(raw[k], list)
    )
    for n in numbers:
        turns = [Turn(t["speaker"], t["dia_id"], t.get("text", "")) for t in raw[f"session_{n}"]]
        conv.sessions.append(Session(n, parse_date(raw[f"session_{n}_date_time"]), turns))
        obs = raw.get(f"session_{n}_observation") or {}
        conv.observations[n] = [
            Observation(speaker, fact, _ids(ev))
            for speaker, facts in obs.items()
            for fact, ev in facts
        ]
    for qa in raw.get("qa", []):
        evidence = _ids(qa.get("evidence", []))
        if qa.get("category") in (1, 2, 3, 4) and evidence:
            conv.questions.append(Question(qa["question"], int(qa["category"]), evidence))
    return conv


def load_all(data: Path, names: list[str] | None = None) -> list[Conversation]:
    """Every ``conv-*.json`` in ``data`` (or just ``names``), sorted by name.

    Raises :class:`LoCoMoMissing` (a ``SystemExit``: one line, exit 1) when it has none.
    """
    files = sorted(data.glob("conv-*.json"))
    if names:
        files = [f for f in files if f.stem in names]
    if not files:
        raise LoCoMoMissing(data, names)
    return [load_conversation(f) for f in files]
