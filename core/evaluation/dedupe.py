"""Dedupe measured on labelled pairs: false merges and duplicate recall, per method and split.

The pairs ship inside the package (``core/data/dedupe_pairs.jsonl``, one JSON object a line:
``id``, ``label`` = ``duplicate`` | ``distinct``, ``case`` (what kind of difference), ``a``,
``b``, ``split`` = ``tune`` | ``holdout``). They were written for this project from realistic
bot memories and committed before the rule in :mod:`core.rules.dedupe` was tuned; the ``holdout``
third was not looked at while tuning.

Methods, all in one :func:`evaluate` call: the rule (:class:`core.rules.dedupe.Deduper` at its
threshold) and plain Jaccard of word-token sets at each of ``jaccard_thresholds``. For each
method and each split (``tune``, ``holdout``, ``all``):

- **false merges**: distinct pairs the method calls duplicates (target 0);
- **duplicate recall**: duplicate pairs it calls duplicates / all duplicate pairs
  (target >= 0.90).

A pair is judged as ``b`` proposed against ``a`` stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any, Literal

from core.rules.dedupe import DEFAULT_THRESHOLD, Deduper, jaccard
from core.rules.text import words

Label = Literal["duplicate", "distinct"]
Split = Literal["tune", "holdout"]
SPLITS: tuple[str, ...] = ("tune", "holdout", "all")
DEFAULT_JACCARD: tuple[float, ...] = (0.6, 0.7, 0.8)
PAIRS_FILE = "data/dedupe_pairs.jsonl"  # inside the ``core`` package


@dataclass(frozen=True, slots=True)
class LabelledPair:
    """Two memory texts and whether they state the same fact."""

    id: int
    label: Label
    case: str
    a: str
    b: str
    split: Split


@dataclass(frozen=True, slots=True)
class MethodScore:
    """One method on one split."""

    method: str
    split: str
    distinct: int  # distinct pairs in the split
    duplicates: int  # duplicate pairs in the split
    false_merges: int  # distinct pairs called duplicates
    merged_duplicates: int  # duplicate pairs called duplicates
    false_merge_ids: tuple[int, ...] = ()
    missed_ids: tuple[int, ...] = ()

    @property
    def recall(self) -> float:
        """Duplicate recall in [0, 1]; 1.0 when the split holds no duplicate pair."""
        return self.merged_duplicates / self.duplicates if self.duplicates else 1.0


@dataclass(frozen=True, slots=True)
class DedupeReport:
    """Every method on every split, in the order evaluated."""

    scores: tuple[MethodScore, ...]
    pairs: int
    threshold: float  # the rule's screen threshold
    methods: tuple[str, ...] = field(default=())

    def score(self, method: str, split: str = "all") -> MethodScore:
        """The score of ``method`` on ``split``; KeyError if it was not evaluated."""
        for s in self.scores:
            if s.method == method and s.split == split:
                return s
        raise KeyError((method, split))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"pairs", "threshold", "methods", "scores": [{method, split,
        distinct, duplicates, false_merges, merged_duplicates, recall, false_merge_ids,
        missed_ids}]}``."""
        return {
            "pairs": self.pairs,
            "threshold": self.threshold,
            "methods": list(self.methods),
            "scores": [
                {
                    **asdict(s),
                    "recall": round(s.recall, 4),
                    "false_merge_ids": list(s.false_merge_ids),
                    "missed_ids": list(s.missed_ids),
                }
                for s in self.scores
            ],
        }


def load_pairs() -> list[LabelledPair]:
    """The labelled pairs packaged with :mod:`core` (``core/data/dedupe_pairs.jsonl``).

    Raises ValueError naming the line when a line is malformed.
    """
    return parse_pairs(resources.files("core").joinpath(PAIRS_FILE).read_text("utf-8"))


def parse_pairs(text: str) -> list[LabelledPair]:
    """Labelled pairs from JSON Lines ``text`` (blank lines skipped).

    Raises ValueError naming the line when a line is malformed, has an unknown label or
    split, or repeats an earlier id.
    """
    pairs: list[LabelledPair] = []
    ids: set[int] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            pair = LabelledPair(
                id=int(raw["id"]),
                label=raw["label"],
                case=str(raw["case"]),
                a=str(raw["a"]),
                b=str(raw["b"]),
                split=raw["split"],
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"dedupe pairs line {n}: {exc!r}") from exc
        if pair.label not in ("duplicate", "distinct") or pair.split not in ("tune", "holdout"):
            raise ValueError(f"dedupe pairs line {n}: bad label or split")
        if not pair.a.strip() or not pair.b.strip():
            raise ValueError(f"dedupe pairs line {n}: empty text")
        if pair.id in ids:
            raise ValueError(f"dedupe pairs line {n}: id {pair.id} repeated")
        ids.add(pair.id)
        pairs.append(pair)
    return pairs


def rule_method(threshold: float) -> Callable[[str, str], bool]:
    """The rule of :class:`Deduper` as a pair judge: is ``b`` a duplicate of stored ``a``?"""
    deduper = Deduper(threshold)

    @dataclass(frozen=True, slots=True)
    class _Row:
        text: str

    return lambda a, b: deduper.match(b, [_Row(a)]) is not None


def jaccard_method(threshold: float) -> Callable[[str, str], bool]:
    """Plain Jaccard of word-token sets at or above ``threshold`` (the rule before issue 14)."""
    return lambda a, b: jaccard(set(words(a)), set(words(b))) >= threshold


def _score(
    method: str, judge: Callable[[str, str], bool], pairs: Sequence[LabelledPair], split: str
) -> MethodScore:
    chosen = [p for p in pairs if split == "all" or p.split == split]
    false_merges, missed = [], []
    for p in chosen:
        merged = judge(p.a, p.b)
        if p.label == "distinct" and merged:
            false_merges.append(p.id)
        elif p.label == "duplicate" and not merged:
            missed.append(p.id)
    duplicates = sum(p.label == "duplicate" for p in chosen)
    return MethodScore(
        method=method,
        split=split,
        distinct=len(chosen) - duplicates,
        duplicates=duplicates,
        false_merges=len(false_merges),
        merged_duplicates=duplicates - len(missed),
        false_merge_ids=tuple(false_merges),
        missed_ids=tuple(missed),
    )


def evaluate(
    pairs: Sequence[LabelledPair],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    jaccard_thresholds: Sequence[float] = DEFAULT_JACCARD,
) -> DedupeReport:
    """Score the rule (screen at ``threshold``) and plain Jaccard at each of
    ``jaccard_thresholds`` on ``pairs``, per split ``tune`` / ``holdout`` / ``all``."""
    methods: list[tuple[str, Callable[[str, str], bool]]] = [
        (f"rule@{threshold:g}", rule_method(threshold))
    ]
    methods += [(f"jaccard@{t:g}", jaccard_method(t)) for t in jaccard_thresholds]
    scores = tuple(_score(name, judge, pairs, split) for name, judge in methods for split in SPLITS)
    return DedupeReport(
        scores=scores,
        pairs=len(pairs),
        threshold=threshold,
        methods=tuple(name for name, _ in methods),
    )


def format_table(report: DedupeReport) -> str:
    """A fixed-width table: one row per method, false merges and recall per split."""
    head = f"{'method':<12}" + "".join(
        f" | {split + ' false merges':>20} {split + ' recall':>15}" for split in SPLITS
    )
    lines = [head, "-" * len(head)]
    for method in report.methods:
        cells = []
        for split in SPLITS:
            s = report.score(method, split)
            cells.append(
                f" | {f'{s.false_merges}/{s.distinct}':>20}"
                f" {f'{s.recall:.3f} ({s.merged_duplicates}/{s.duplicates})':>15}"
            )
        lines.append(f"{method:<12}" + "".join(cells))
    lines.append(
        f"{report.pairs} labelled pairs; false merges = distinct pairs called duplicates "
        "(target 0); recall = duplicate pairs found (target >= 0.90)"
    )
    return "\n".join(lines)
