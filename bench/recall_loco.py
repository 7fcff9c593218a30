"""Score-fusion constants chosen leave-one-conversation-out on LoCoMo, not fitted to all six.

    python bench/recall_loco.py [--data DIR] [--json] [--no-minilm]

For each shared LoCoMo conversation (one user's memories, as ``bench/retrieval.py`` loads
them) and each question, one pass records BM25's top 60 (the store's own search) and every
memory's cosine with the query: WordLlama static vectors (:mod:`core.memory.static`, with and
without the expansions of :mod:`core.rules.expand`, raw and after removing the user's mean
vector, the common component of Mu and Viswanath, "All-but-the-Top", ICLR 2018) and MiniLM
(:mod:`core.memory.embeddings`, unless ``--no-minilm``). Fusions are then scored offline:

- ``score``: ``bm25 / best bm25`` over BM25's top ``window`` plus ``weight * cosine``, as
  :func:`core.memory.hybrid.score_fusion` (``window`` absolute: the bench recalls ``k = 10``,
  so today's ``SCORE_WINDOW = 2`` is a window of 20);
- ``rrf``: BM25's and MiniLM's top 10 by reciprocal rank (today's ``hybrid``).

BM25's ``b`` (:data:`core.rules.bm25.BM25_B`) is recorded at each value of ``B_GRID`` too,
and chosen leave-one-out by the hits of BM25 alone, the default and the semantic extra
together (one constant serves all three: it is the store's).

Each variant's constants are chosen on five conversations and its Hit@6 measured on the sixth,
for each sixth in turn; the table gives the held-out Hit@6 per conversation, their
question-weighted mean, the in-sample best over all six, and the share of questions whose
evidence is in any memory at all (the ceiling). Nothing here changes the product's recall.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import core.rules.bm25
from bench.locomo import DEFAULT_DATA, load_all
from bench.retrieval import load_users
from core.memory.hybrid import DATED_FIRST
from core.memory.static import StaticEmbedder
from core.rules.expand import expansions
from core.rules.when import DAYS_AFTER, DAYS_BEFORE, named_days
from core.store.sqlite.store import SQLiteStore

K = 6
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
NAMES_DAYS = "names days"  # questions naming a date, month or year (core.rules.when)
BM25_DEPTH = 60
B_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75)
"""The BM25 ``b`` values recorded (0.75 is FTS5's and Okapi's usual value)."""
Vector = npt.NDArray[np.float64]


@dataclass
class Query:
    bm25: Vector  # per memory: BM25 score, 0 outside the top BM25_DEPTH
    bm25_rank: npt.NDArray[np.int64]  # per memory: BM25 rank from 0, BM25_DEPTH outside
    cosines: dict[str, Vector]
    relevant: npt.NDArray[np.bool_]
    days: npt.NDArray[np.datetime64]  # per memory: the day it was stored (its session's)
    named: list[tuple[date, date]]  # the days the question names (core.rules.when)
    category: int = 0  # LoCoMo's: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop
    by_b: dict[float, tuple[Vector, npt.NDArray[np.int64]]] = field(default_factory=dict)

    def at_b(self, b: float) -> Query:
        """This question with BM25's scores and ranks at length normalisation ``b``."""
        bm25, rank = self.by_b[b]
        return replace(self, bm25=bm25, bm25_rank=rank)

    def dated(self, before: int, after: int) -> npt.NDArray[np.bool_]:
        """Per memory: stored from ``before`` days before a named span to ``after`` after."""
        mask = np.zeros(len(self.days), dtype=np.bool_)
        for first, last in self.named:
            start = np.datetime64(first - timedelta(days=before), "D")
            mask |= (self.days >= start) & (
                self.days <= np.datetime64(last + timedelta(days=after), "D")
            )
        return mask


def unit(m: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, 1.0)


async def bm25_at(
    store: SQLiteStore, user_key: str, text: str, pos: dict[int, int], b: float
) -> tuple[Vector, npt.NDArray[np.int64]]:
    """The store's BM25 top ``BM25_DEPTH`` for ``text`` with ``BM25_B = b``, per memory:
    (score, 0 outside; rank from 0, ``BM25_DEPTH`` outside)."""
    kept = core.rules.bm25.BM25_B
    core.rules.bm25.BM25_B = b  # read by core.rules.bm25.rescore at each call
    try:
        found = await store.search(user_key=user_key, query=text, k=BM25_DEPTH)
    finally:
        core.rules.bm25.BM25_B = kept
    bm25 = np.zeros(len(pos))
    rank = np.full(len(pos), BM25_DEPTH, dtype=np.int64)
    for r, hit in enumerate(found):
        bm25[pos[hit.memory.id]] = hit.score
        rank[pos[hit.memory.id]] = r
    return bm25, rank


async def collect(data: Path, minilm: bool) -> list[tuple[str, list[Query]]]:
    convs = load_all(data)
    static = StaticEmbedder()
    semantic = None
    if minilm:
        from core.memory.embeddings import load_embedder

        semantic = load_embedder(None)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "loco.db"), synchronous="normal")
        try:
            for u in await load_users(store, convs):
                memories = await store.export(user_key=u.user_key)
                pos = {m.id: j for j, m in enumerate(memories)}
                days = np.array([m.created_at.date() for m in memories], dtype="datetime64[D]")
                texts = [m.text for m in memories]
                s = static.embed_now(texts)
                mean = s.mean(axis=0)
                centred = unit(s - mean)
                mini = await semantic.embed(texts) if semantic is not None else None
                queries = []
                for q in u.conv.questions:
                    by_b = {}
                    for b in (*B_GRID, core.rules.bm25.BM25_B):
                        by_b[b] = await bm25_at(store, u.user_key, q.text, pos, b)
                    bm25, rank = by_b[core.rules.bm25.BM25_B]
                    texts_q = [q.text] + [f"{q.text} {e}" for e in expansions(q.text)]
                    v = static.embed_now(texts_q)
                    vc = unit(v - mean)
                    cos = {
                        "static": (s @ v[0]).astype(np.float64),
                        "static+expand": (s @ v.T).max(axis=1).astype(np.float64),
                        "centred": (centred @ vc[0]).astype(np.float64),
                        "centred+expand": (centred @ vc.T).max(axis=1).astype(np.float64),
                    }
                    if mini is not None and semantic is not None:
                        cos["minilm"] = (mini @ (await semantic.embed([q.text]))[0]).astype(
                            np.float64
                        )
                    relevant = np.array(
                        [bool(u.evidence.get(m.id, set()) & q.evidence) for m in memories]
                    )
                    queries.append(
                        Query(bm25, rank, cos, relevant, days, named_days(q.text), q.category, by_b)
                    )
                out.append((u.conv.name, queries))
        finally:
            await store.close()
    return out


def zscore(x: Vector) -> Vector:
    return (x - x.mean()) / (x.std() + 1e-9)


def score_fused(q: Query, window: int, weights: dict[str, float], z: bool) -> Vector:
    best = q.bm25.max()
    fused = np.where(q.bm25_rank < window, q.bm25 / best if best > 0 else 0.0, 0.0)
    for name, w in weights.items():
        fused = fused + w * (zscore(q.cosines[name]) if z else q.cosines[name])
    return fused


def rrf_fused(q: Query, window: int = 10, rrf_k: int = 60) -> Vector:
    fused = np.where(q.bm25_rank < window, 1.0 / (rrf_k + 1 + q.bm25_rank), 0.0)
    order = np.argsort(-q.cosines["minilm"], kind="stable")[:window]
    fused[order] += 1.0 / (rrf_k + 1 + np.arange(len(order)))
    return fused


def dated_first(q: Query, fused: Vector, before: int, after: int, rrf: bool) -> Vector:
    """The memories stored on the named days first (:data:`core.memory.hybrid.DATED_FIRST`),
    in their fused order; for ``rrf``, by the reciprocal rank fusion over them alone, as
    :meth:`core.memory.hybrid.HybridRecaller.recall` does."""
    mask = q.dated(before, after)
    if not mask.any():
        return fused
    if rrf:
        # BM25's top 10 (the recall's window) on the named days, re-ranked among themselves.
        lexical = np.flatnonzero(mask & (q.bm25_rank < 10))
        rank = np.full(len(mask), BM25_DEPTH, dtype=np.int64)
        rank[lexical[np.argsort(q.bm25_rank[lexical], kind="stable")]] = np.arange(len(lexical))
        cosine = {"minilm": np.where(mask, q.cosines["minilm"], -np.inf)}
        sub = Query(q.bm25, rank, cosine, q.relevant, q.days, q.named)
        return np.where(mask, DATED_FIRST + rrf_fused(sub), fused)
    return fused + DATED_FIRST * mask


def hit(q: Query, fused: Vector) -> bool:
    return bool(q.relevant[np.argsort(-fused, kind="stable")[:K]].any())


Params = tuple[float, ...]


@dataclass
class Variant:
    name: str
    grid: Sequence[Params]
    fuse: Callable[[Query, Params], Vector]


def variants(minilm: bool) -> list[Variant]:
    windows = (12, 20, 40)
    weights = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
    out = [
        Variant("bm25", [()], lambda q, p: -q.bm25_rank.astype(np.float64)),
        Variant(
            "static (today: window 20, weight 2)",
            [(20, 2.0)],
            lambda q, p: score_fused(q, 20, {"static+expand": 2.0}, False),
        ),
    ]
    for cos in ("static+expand", "static", "centred+expand", "centred"):
        out.append(
            Variant(
                f"score: bm25 + w * {cos}",
                list(itertools.product(windows, weights)),
                lambda q, p, cos=cos: score_fused(q, int(p[0]), {cos: p[1]}, False),
            )
        )
    slack = [(0, 0), (1, 1), (DAYS_BEFORE, DAYS_AFTER), (0, 7), (3, 3)]
    out.append(
        Variant(
            f"static, dated first ({DAYS_BEFORE} day before, {DAYS_AFTER} after)",
            [()],
            lambda q, p: dated_first(
                q, score_fused(q, 20, {"static+expand": 2.0}, False), DAYS_BEFORE, DAYS_AFTER, False
            ),
        )
    )
    out.append(
        Variant(
            "static, dated first (days before/after tuned)",
            slack,
            lambda q, p: dated_first(
                q, score_fused(q, 20, {"static+expand": 2.0}, False), int(p[0]), int(p[1]), False
            ),
        )
    )
    out.append(
        Variant(
            "static centred (weight 2), dated first",
            [()],
            lambda q, p: dated_first(
                q,
                score_fused(q, 20, {"centred+expand": 2.0}, False),
                DAYS_BEFORE,
                DAYS_AFTER,
                False,
            ),
        )
    )
    if minilm:
        out.append(Variant("hybrid (today: RRF of bm25, minilm)", [()], lambda q, p: rrf_fused(q)))
        out.append(
            Variant(
                f"hybrid, dated first ({DAYS_BEFORE} day before, {DAYS_AFTER} after)",
                [()],
                lambda q, p: dated_first(q, rrf_fused(q), DAYS_BEFORE, DAYS_AFTER, True),
            )
        )
        out.append(
            Variant(
                "hybrid, dated first (days before/after tuned)",
                slack,
                lambda q, p: dated_first(q, rrf_fused(q), int(p[0]), int(p[1]), True),
            )
        )
        out.append(
            Variant(
                "score: bm25 + a * z(centred) + b * z(minilm)",
                list(itertools.product(windows, (0.0, 0.25, 0.5), (0.2, 0.4, 0.6, 1.0))),
                lambda q, p: score_fused(q, int(p[0]), {"centred": p[1], "minilm": p[2]}, True),
            )
        )
    return out


def rate(v: Variant, convs: Sequence[list[Query]], p: Params) -> float:
    hits = [hit(q, v.fuse(q, p)) for qs in convs for q in qs]
    return sum(hits) / len(hits)


def leave_one_out(v: Variant, data: Sequence[tuple[str, list[Query]]]) -> dict[str, object]:
    held: dict[str, float] = {}
    chosen: dict[str, Params] = {}
    by_category: dict[str, list[bool]] = {}
    for i, (name, qs) in enumerate(data):
        train = [x for j, (_, x) in enumerate(data) if j != i]
        best = max(v.grid, key=lambda p: rate(v, train, p))
        chosen[name] = best
        held[name] = round(rate(v, [qs], best), 3)
        for q in qs:
            h = hit(q, v.fuse(q, best))
            by_category.setdefault(CATEGORIES.get(q.category, "other"), []).append(h)
            if q.named:
                by_category.setdefault(NAMES_DAYS, []).append(h)
    n = {name: len(qs) for name, qs in data}
    mean = sum(held[c] * n[c] for c in held) / sum(n.values())
    all_convs = [qs for _, qs in data]
    in_sample = max(v.grid, key=lambda p: rate(v, all_convs, p))
    return {
        "held_out": round(mean, 3),
        "per_conversation": held,
        "chosen": chosen,
        "in_sample": round(rate(v, all_convs, in_sample), 3),
        "in_sample_params": in_sample,
        "held_out_by_category": {c: round(sum(h) / len(h), 3) for c, h in by_category.items()},
    }


def recalls_at_b(minilm: bool) -> dict[str, Callable[[Query], Vector]]:
    """The product's recalls as fusions of one question's records: BM25 alone (in the
    store's own order, ties newest first), the default and, with MiniLM, the extra."""
    out: dict[str, Callable[[Query], Vector]] = {
        "bm25": lambda q: -q.bm25_rank.astype(np.float64),
        "default": lambda q: dated_first(
            q, score_fused(q, 20, {"static+expand": 2.0}, False), DAYS_BEFORE, DAYS_AFTER, False
        ),
    }
    if minilm:
        out["hybrid"] = lambda q: dated_first(q, rrf_fused(q), DAYS_BEFORE, DAYS_AFTER, True)
    return out


def choose_b(data: Sequence[tuple[str, list[Query]]], minilm: bool) -> dict[str, object]:
    """BM25's ``b`` chosen leave-one-out by the hits of every recall together: per ``b``,
    each recall's Hit@6 over all six (in-sample); per held-out conversation, the ``b`` the
    other five choose; each recall's held-out Hit@6 at those choices."""
    recalls = recalls_at_b(minilm)
    hits = {
        b: {
            name: [[hit(q.at_b(b), fuse(q.at_b(b))) for q in qs] for _, qs in data]
            for name, fuse in recalls.items()
        }
        for b in B_GRID
    }
    total = sum(len(qs) for _, qs in data)
    chosen: dict[str, float] = {}
    held = dict.fromkeys(recalls, 0)
    for i, (name, _) in enumerate(data):
        best = max(
            B_GRID,
            key=lambda b: sum(
                sum(per_conv[j])
                for per_conv in hits[b].values()
                for j in range(len(data))
                if j != i
            ),
        )
        chosen[name] = best
        for recall in recalls:
            held[recall] += sum(hits[best][recall][i])
    return {
        "in_sample": {
            str(b): {r: round(sum(map(sum, h)) / total, 3) for r, h in hits[b].items()}
            for b in B_GRID
        },
        "chosen": chosen,
        "held_out": {r: round(n / total, 3) for r, n in held.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--no-minilm", action="store_true", help="skip MiniLM (no torch)")
    args = parser.parse_args()
    data = asyncio.run(collect(Path(args.data), not args.no_minilm))
    reachable = np.mean([q.relevant.any() for _, qs in data for q in qs])
    result: dict[str, object] = {"reachable": round(float(reachable), 3)}
    names = [name for name, _ in data]
    print("LoCoMo Hit@6, constants chosen on 5 conversations, measured on the 6th")
    print(f"{'variant':<46}{'in-sample':>10}{'held-out':>10}" + "".join(f"{n:>9}" for n in names))
    for v in variants(not args.no_minilm):
        r = leave_one_out(v, data)
        result[v.name] = r
        per = r["per_conversation"]
        assert isinstance(per, dict)
        print(
            f"{v.name:<46}{r['in_sample']:>10.3f}{r['held_out']:>10.3f}"
            + "".join(f"{per[n]:>9.3f}" for n in names)
        )
    print(f"questions whose evidence is in some memory (the ceiling): {reachable:.3f}")
    b = choose_b(data, not args.no_minilm)
    print("\nBM25 b: Hit@6 of each recall at each b (all six), and b chosen leave-one-out")
    in_sample = b["in_sample"]
    assert isinstance(in_sample, dict)
    for value, row in in_sample.items():
        print(f"  b = {value:<5}" + "".join(f"{r:>10} {h:.3f}" for r, h in row.items()))
    print(f"  chosen per held-out conversation: {b['chosen']}; held-out: {b['held_out']}")
    cats = [CATEGORIES[c] for c in sorted(CATEGORIES)] + [NAMES_DAYS]
    n = {c: sum(CATEGORIES.get(q.category) == c for _, qs in data for q in qs) for c in cats}
    n[NAMES_DAYS] = sum(bool(q.named) for _, qs in data for q in qs)
    print("\nheld-out Hit@6 by LoCoMo category (questions)")
    print(f"{'variant':<46}" + "".join(f"{f'{c} ({n[c]})':>18}" for c in cats))
    for name, row in result.items():
        if isinstance(row, dict):
            per_cat = row["held_out_by_category"]
            assert isinstance(per_cat, dict)
            print(f"{name:<46}" + "".join(f"{per_cat.get(c, 0.0):>18.3f}" for c in cats))
    if args.json:
        print(json.dumps(result | {"bm25_b": b}))


if __name__ == "__main__":
    main()
