"""``selfmind eval reflection``: run the product's real reflection over LoCoMo and score it.

For each conversation, session by session, turn by turn in order: each speaker is their own
user (``cli:eval-<conv>-<speaker>``); for speaker S's turn, S's text is the user message and
the other speaker's next turn of the session fills the assistant's place. The exchange is
stored as turns and reflected by :class:`core.memory.reflection.Reflector` (the product's prompt,
schema, rules check, dedupe and supersede, through the ``ChatModel`` seam) into a throwaway
SQLite store. At the end of each session each speaker's active memories are scored against
the session's observations of them (:mod:`core.evaluation.judge`, or
:mod:`core.evaluation.scoring` offline). Then the negative and correction suites run
(:mod:`core.evaluation.suites`), each case as a fresh user.

Resumable: with a checkpoint file, every finished unit (one reflected turn, one scored
speaker-session, one suite case) is appended as a JSON line, and the store lives beside it
(``FILE.<model>.db``); a second run with the same file and options skips what is done and
gives the same totals as one run (:func:`totals` reads only the file and the store). The run
stops between units when ``should_stop()`` turns true (Ctrl-C in the CLI). A process killed
outright between a reflection's store write and its line (a few milliseconds) leaves that
turn reflected but unrecorded: the resumed run counts it as a failed reflection.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from core.evaluation.judge import Judge, transcript
from core.evaluation.locomo import Conversation, Session
from core.evaluation.locomo import Turn as LocomoTurn
from core.evaluation.scoring import OFFLINE_RULE, SessionScore, offline_score
from core.evaluation.suites import correction_cases, negative_cases
from core.memory.reflection import ReflectionResult, Reflector
from core.model.claude import ChatModel, Usage
from core.model.prices import price_of
from core.platforms import LOCAL
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.types import NewMemory, NewTurn

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


def user_key(conv: str, speaker: str) -> str:
    """The throwaway user key of one speaker."""
    return f"{LOCAL}:eval-{conv}-{_slug(speaker)}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.casefold()).strip("-") or "x"


def exchanges(session: Session) -> list[tuple[LocomoTurn, LocomoTurn | None]]:
    """``(turn, answer)`` pairs: each turn with the other speaker's next turn (or None)."""
    out: list[tuple[LocomoTurn, LocomoTurn | None]] = []
    for i, turn in enumerate(session.turns):
        answer = next((t for t in session.turns[i + 1 :] if t.speaker != turn.speaker), None)
        out.append((turn, answer))
    return out


def turn_time(session: Session, index: int) -> datetime:
    """When turn ``index`` of ``session`` was sent: the session's date plus index seconds."""
    return session.date.replace(tzinfo=UTC) + timedelta(seconds=index)


@dataclass
class Checkpoint:
    """The JSON Lines file of finished units (or an in-memory list without a file)."""

    path: Path | None
    header: dict[str, Any]
    units: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path | None, header: dict[str, Any]) -> Checkpoint:
        """Load ``path`` if it exists (its header must equal ``header``: ``ValueError``
        otherwise) or start it; None keeps everything in memory."""
        cp = cls(path, header)
        if path is None:
            return cp
        if path.exists() and path.stat().st_size:
            lines = path.read_text(encoding="utf-8").splitlines()
            first = json.loads(lines[0])
            if first != {"header": header}:
                raise ValueError(
                    f"{path} was written by a run with other options; use another --out"
                )
            for line in lines[1:]:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash: that unit runs again
                cp.units[row["unit"]] = row
        else:
            path.write_text(json.dumps({"header": header}) + "\n", encoding="utf-8")
        return cp

    def done(self, unit: str) -> bool:
        """True when ``unit`` is already recorded."""
        return unit in self.units

    def record(self, unit: str, row: dict[str, Any]) -> None:
        """Append one finished unit (flushed before returning)."""
        row = {"unit": unit, **row}
        self.units[unit] = row
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()


def _usage_row(usage: Usage | None) -> dict[str, int]:
    return asdict(usage) if usage is not None else asdict(Usage())


def _add_usage(a: Usage, row: dict[str, int]) -> Usage:
    return Usage(**{k: getattr(a, k) + int(row.get(k, 0)) for k in asdict(a)})


ProgressCallback = Callable[[str, int], None]
"""``progress(label, units_done_now)``: called after each finished unit."""


@dataclass
class EvalRun:
    """One reflection model's run over ``conversations`` and the suites.

    ``judge`` None means ``--offline-match``. ``store`` is a SQLite store (throwaway, or the
    one beside the checkpoint file). ``should_stop`` is polled between units.
    """

    model_name: str
    model: ChatModel
    store: Store
    checkpoint: Checkpoint
    conversations: Sequence[Conversation]
    sessions: int | None
    judge: Judge | None
    dedupe_threshold: float = 0.7
    related_k: int = 10
    max_attempts: int = 3
    retry_delay_s: float = 1.0
    progress: ProgressCallback | None = None
    should_stop: Callable[[], bool] = lambda: False
    stopped: bool = False

    def __post_init__(self) -> None:
        self.reflector = Reflector(
            store=self.store,
            model=self.model,
            deduper=Deduper(threshold=self.dedupe_threshold),
            related_k=self.related_k,
            max_attempts=self.max_attempts,
            retry_delay_s=self.retry_delay_s,
            model_name=self.model_name,
        )

    def _unit(self, name: str) -> str:
        return f"{self.model_name}|{name}"

    def _tick(self, label: str) -> None:
        if self.progress is not None:
            self.progress(label, 1)

    async def run(self) -> bool:
        """Run every unit not yet recorded; False when stopped early."""
        for conv in self.conversations:
            for session in conv.sessions[: self.sessions or None]:
                if not await self._session(conv, session):
                    return False
        for case in negative_cases():
            if not await self._negative(case.id, case.user, case.assistant):
                return False
        for cc in correction_cases():
            if not await self._correction(cc.id, cc.seed, cc.user, cc.assistant):
                return False
        return True

    def _stop(self) -> bool:
        if self.should_stop():
            self.stopped = True
        return self.stopped

    async def _reflect(
        self, *, key: str, conversation: str, ref: str, text: str, answer: str, at: datetime
    ) -> ReflectionResult | None:
        found = await self.store.find_turn(conversation_key=conversation, platform_ref=ref)
        if found is None:
            turn_id = await self.store.add_turn(
                turn=NewTurn(
                    conversation_key=conversation,
                    user_key=key,
                    role="user",
                    text=text,
                    origin="private",
                    sent_at=at,
                    platform_ref=ref,
                    reflection="answering",
                )
            )
            await self.store.finish_turn(turn_id=turn_id, answer=answer)
        else:
            turn_id = found.id  # stored by a run cut before it recorded the unit
        return await self.reflector.reflect(turn_id)

    async def _session(self, conv: Conversation, session: Session) -> bool:
        for index, (turn, answer) in enumerate(exchanges(session)):
            unit = self._unit(f"{conv.name}|{turn.dia_id}")
            if self.checkpoint.done(unit):
                continue
            if self._stop():
                return False
            result = await self._reflect(
                key=user_key(conv.name, turn.speaker),
                conversation=f"eval:{conv.name}:{_slug(turn.speaker)}",
                ref=turn.dia_id,
                text=turn.text,
                answer=answer.text if answer is not None else "",
                at=turn_time(session, index),
            )
            self.checkpoint.record(
                unit,
                _result_row("turn", result, conv=conv.name)
                | {
                    "session": session.number,
                    "speaker": turn.speaker,
                },
            )
            self._tick("reflect")
        for speaker in (conv.speaker_a, conv.speaker_b):
            unit = self._unit(f"{conv.name}|s{session.number}|{speaker}")
            if self.checkpoint.done(unit):
                continue
            if self._stop():
                return False
            score, usage = await self._score(conv, session, speaker)
            self.checkpoint.record(
                unit,
                {
                    "t": "score",
                    "conv": conv.name,
                    "session": session.number,
                    "speaker": speaker,
                    **asdict(score),
                    "usage": _usage_row(usage),
                },
            )
            self._tick("score")
        return True

    async def _score(
        self, conv: Conversation, session: Session, speaker: str
    ) -> tuple[SessionScore, Usage | None]:
        key = user_key(conv.name, speaker)
        active = await self.store.export(user_key=key)
        added: set[int] = set()
        prefix = self._unit(f"{conv.name}|D{session.number}:")
        for unit, row in self.checkpoint.units.items():
            if unit.startswith(prefix) and row.get("speaker") == speaker:
                added.update(row.get("added_ids", []))
        observations = [
            o.text for o in conv.observations.get(session.number, []) if o.speaker == speaker
        ]
        new = [m for m in active if m.id in added]
        if self.judge is None:
            own = [t.text for t in session.turns if t.speaker == speaker]
            other = [t.text for t in session.turns if t.speaker != speaker]
            score = offline_score(
                name=speaker,
                observations=observations,
                memories=[m.text for m in active],
                new_memories=[m.text for m in new],
                own_turns=own,
                other_turns=other,
            )
            return score, None
        judged = await self.judge.score(
            transcript_text=transcript(session.turns, session.date.isoformat(timespec="minutes")),
            name=speaker,
            observations=observations,
            memories=[(m.id, m.text, m.id in added) for m in active],
        )
        return judged.score, judged.usage

    async def _negative(self, case_id: str, user: str, assistant: str) -> bool:
        unit = self._unit(f"negative|{case_id}")
        if self.checkpoint.done(unit):
            return True
        if self._stop():
            return False
        key = f"{LOCAL}:eval-{_slug(case_id)}"
        result = await self._reflect(
            key=key,
            conversation=f"eval:{case_id}",
            ref=case_id,
            text=user,
            answer=assistant,
            at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        )
        left = await self.store.count(user_key=key)
        row = _result_row("negative", result) | {"left": left}
        self.checkpoint.record(unit, row)
        self._tick("negative suite")
        return True

    async def _correction(self, case_id: str, seed: str, user: str, assistant: str) -> bool:
        unit = self._unit(f"correction|{case_id}")
        if self.checkpoint.done(unit):
            return True
        if self._stop():
            return False
        key = f"{LOCAL}:eval-{_slug(case_id)}"
        seeded = await self.store.list_memories(user_key=key, include_superseded=True)
        if not seeded:
            await self.store.add(
                user_key=key,
                memory=NewMemory(text=seed, source="remember"),
                dedupe=Deduper(threshold=self.dedupe_threshold),
            )
            seeded = await self.store.list_memories(user_key=key, include_superseded=True)
        seed_id = min(m.id for m in seeded)
        result = await self._reflect(
            key=key,
            conversation=f"eval:{case_id}",
            ref=case_id,
            text=user,
            answer=assistant,
            at=datetime(2026, 1, 5, 12, 0, tzinfo=UTC),
        )
        old = await self.store.get(user_key=key, memory_id=seed_id)
        replaced = old is not None and old.superseded_by not in (None, seed_id)
        row = _result_row("correction", result) | {"superseded_seed": replaced}
        self.checkpoint.record(unit, row)
        self._tick("correction suite")
        return True


def _result_row(kind: str, result: ReflectionResult | None, **extra: Any) -> dict[str, Any]:
    return {
        "t": kind,
        **extra,
        "failed": result is None,
        "added": len(result.added) if result else 0,
        "added_ids": [m.id for m in result.added] if result else [],
        "duplicates": result.duplicates if result else 0,
        "rejected": result.rejected if result else 0,
        "superseded": result.superseded if result else 0,
        "usage": _usage_row(result.usage if result else None),
    }


# ------------------------------------------------------------------------------ totals
@dataclass
class ConversationTotals:
    """Figures of one conversation (or of all: ``name == "total"``)."""

    name: str
    turns: int = 0
    failed: int = 0
    added: int = 0
    duplicates: int = 0
    rejected: int = 0
    superseded: int = 0
    observations: int = 0
    covered: int = 0
    new_memories: int = 0
    supported: int = 0
    from_other: int = 0
    reflection_usage: Usage = field(default_factory=Usage)
    judge_usage: Usage = field(default_factory=Usage)

    @property
    def coverage(self) -> float | None:
        """Share of observations stated by a memory (None without observations)."""
        return self.covered / self.observations if self.observations else None

    @property
    def support(self) -> float | None:
        """Share of new memories grounded in an observation or the speaker's own words."""
        return self.supported / self.new_memories if self.new_memories else None

    @property
    def memories_per_turn(self) -> float:
        """Memories stored per reflected turn."""
        return self.added / self.turns if self.turns else 0.0

    def add_turn(self, row: dict[str, Any]) -> None:
        """Count one recorded turn unit."""
        self.turns += 1
        self.failed += int(row["failed"])
        for name in ("added", "duplicates", "rejected", "superseded"):
            setattr(self, name, getattr(self, name) + int(row[name]))
        self.reflection_usage = _add_usage(self.reflection_usage, row["usage"])

    def add_score(self, row: dict[str, Any]) -> None:
        """Count one recorded score unit."""
        for name in ("observations", "covered", "new_memories", "supported", "from_other"):
            setattr(self, name, getattr(self, name) + int(row[name]))
        self.judge_usage = _add_usage(self.judge_usage, row["usage"])

    def merge(self, other: ConversationTotals) -> None:
        """Add ``other``'s counts to these."""
        for name, value in vars(other).items():
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, name, getattr(self, name) + value)
        self.reflection_usage = _add_usage(self.reflection_usage, asdict(other.reflection_usage))
        self.judge_usage = _add_usage(self.judge_usage, asdict(other.judge_usage))


@dataclass
class SuiteTotals:
    """Negative suite: ``cases``, ``stored`` (cases that left a memory). Correction suite:
    ``cases``, ``superseded`` (cases whose seed was superseded)."""

    cases: int = 0
    stored: int = 0
    superseded: int = 0
    failed: int = 0
    usage: Usage = field(default_factory=Usage)
    failing: list[str] = field(default_factory=list)


@dataclass
class ModelReport:
    """Everything :func:`totals` computes for one reflection model."""

    model: str
    judge_model: str | None
    complete: bool
    conversations: list[ConversationTotals]
    total: ConversationTotals
    negative: SuiteTotals
    correction: SuiteTotals
    by_kind: dict[str, int]
    by_category: dict[str, int]

    @property
    def false_store_rate(self) -> float | None:
        """Share of negative cases that left a memory behind."""
        return self.negative.stored / self.negative.cases if self.negative.cases else None

    @property
    def supersede_rate(self) -> float | None:
        """Share of correction cases whose seeded memory was superseded."""
        c = self.correction
        return c.superseded / c.cases if c.cases else None

    def cost(self, usage: Usage, model: str | None) -> float | None:
        """Dollars at list prices (None for a model the price table does not know)."""
        price = price_of(model) if model else None
        return price.cost(usage) if price else None

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        t = self.total
        per100 = 100 / t.turns if t.turns else 0.0

        def usage(u: Usage) -> dict[str, int]:
            return asdict(u)

        def conv(c: ConversationTotals) -> dict[str, Any]:
            return {
                "name": c.name,
                "turns": c.turns,
                "failed_reflections": c.failed,
                "memories": c.added,
                "memories_per_turn": round(c.memories_per_turn, 4),
                "observations": c.observations,
                "coverage": _round(c.coverage),
                "new_memories_scored": c.new_memories,
                "support": _round(c.support),
                "from_other_speaker": c.from_other,
                "rule_rejections": c.rejected,
                "duplicates": c.duplicates,
                "supersedes": c.superseded,
                "reflection_tokens": usage(c.reflection_usage),
                "judge_tokens": usage(c.judge_usage),
            }

        refl_cost = self.cost(t.reflection_usage, self.model)
        judge_cost = self.cost(t.judge_usage, self.judge_model) if self.judge_model else 0.0
        return {
            "model": self.model,
            "judge_model": self.judge_model,
            "scoring": "judge" if self.judge_model else OFFLINE_RULE,
            "complete": self.complete,
            "conversations": [conv(c) for c in self.conversations],
            "total": conv(t),
            "by_kind": self.by_kind,
            "by_category": self.by_category,
            "per_100_turns": {
                "reflection_tokens": {
                    k: round(v * per100) for k, v in asdict(t.reflection_usage).items()
                },
                "judge_tokens": {k: round(v * per100) for k, v in asdict(t.judge_usage).items()},
                "reflection_cost_usd": _round(
                    refl_cost * per100 if refl_cost is not None else None, 6
                ),
                "judge_cost_usd": _round(
                    judge_cost * per100 if judge_cost is not None else None, 6
                ),
            },
            "negative_suite": {
                "cases": self.negative.cases,
                "false_store_rate": _round(self.false_store_rate),
                "stored_in": self.negative.failing,
                "tokens": usage(self.negative.usage),
            },
            "correction_suite": {
                "cases": self.correction.cases,
                "supersede_rate": _round(self.supersede_rate),
                "not_superseded": self.correction.failing,
                "tokens": usage(self.correction.usage),
            },
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


async def totals(
    *,
    model: str,
    judge_model: str | None,
    checkpoint: Checkpoint,
    store: Store,
    conversations: Sequence[Conversation],
    complete: bool,
) -> ModelReport:
    """Sum the recorded units of ``model`` (and the store's active memories by kind and
    category for the LoCoMo speakers)."""
    per: dict[str, ConversationTotals] = {c.name: ConversationTotals(c.name) for c in conversations}
    negative, correction = SuiteTotals(), SuiteTotals()
    for unit, row in checkpoint.units.items():
        if not unit.startswith(f"{model}|"):
            continue
        kind = row["t"]
        if kind == "turn" and row["conv"] in per:
            per[row["conv"]].add_turn(row)
        elif kind == "score" and row["conv"] in per:
            per[row["conv"]].add_score(row)
        elif kind in ("negative", "correction"):
            suite = negative if kind == "negative" else correction
            suite.cases += 1
            suite.failed += int(row["failed"])
            suite.usage = _add_usage(suite.usage, row["usage"])
            name = unit.rsplit("|", 1)[1]
            if kind == "negative" and row["left"]:
                suite.stored += 1
                suite.failing.append(name)
            if kind == "correction":
                if row["superseded_seed"]:
                    suite.superseded += 1
                else:
                    suite.failing.append(name)
    total = ConversationTotals("total")
    for c in per.values():
        total.merge(c)
    kinds: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    for conv in conversations:
        for speaker in (conv.speaker_a, conv.speaker_b):
            stats = await store.stats(user_key=user_key(conv.name, speaker))
            kinds.update(stats.by_kind)
            categories.update(stats.by_category)
    return ModelReport(
        model=model,
        judge_model=judge_model,
        complete=complete,
        conversations=list(per.values()),
        total=total,
        negative=negative,
        correction=correction,
        by_kind=dict(sorted(kinds.items())),
        by_category=dict(sorted(categories.items())),
    )


def unit_count(conversations: Sequence[Conversation], sessions: int | None) -> int:
    """Units of one model's run: turns, speaker-sessions, suite cases."""
    n = len(negative_cases()) + len(correction_cases())
    for conv in conversations:
        for session in conv.sessions[: sessions or None]:
            n += len(session.turns) + 2
    return n
