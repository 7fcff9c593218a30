"""bench/recall_loco.py: constants are chosen without the conversation they are measured on."""

from __future__ import annotations

from datetime import date

import numpy as np

from bench.recall_loco import BM25_DEPTH, Query, Variant, dated_first, leave_one_out, rrf_fused


def query(relevant_at: int, n: int = 8) -> Query:
    """A question whose one relevant memory is ``relevant_at``; BM25 ranks memory 0..n-1 in
    order, the cosine ranks them in reverse."""
    rank = np.arange(n, dtype=np.int64)
    bm25 = np.linspace(2.0, 1.0, n)
    relevant = np.zeros(n, dtype=np.bool_)
    relevant[relevant_at] = True
    days = np.array([f"2023-05-{1 + i:02d}" for i in range(n)], dtype="datetime64[D]")
    return Query(bm25, rank, {"minilm": np.linspace(0.0, 1.0, n)}, relevant, days, [])


def test_each_conversation_is_measured_with_constants_chosen_on_the_others() -> None:
    # p = (0,) ranks by BM25 (relevant memory 0 first), p = (1,) by the reversed cosine.
    variant = Variant(
        "pick", [(0.0,), (1.0,)], lambda q, p: q.cosines["minilm"] if p[0] else q.bm25
    )
    data = [("a", [query(0)]), ("b", [query(0)]), ("c", [query(7)])]
    result = leave_one_out(variant, data)
    # c alone prefers the cosine, but a and b choose for it: BM25, so c is missed held out.
    assert result["per_conversation"] == {"a": 1.0, "b": 1.0, "c": 0.0}
    assert result["chosen"]["c"] == (0.0,)
    assert result["held_out"] == round(2 / 3, 3)


def test_rrf_counts_only_each_list_s_window() -> None:
    q = query(0, n=30)
    q.bm25_rank[:] = BM25_DEPTH  # nothing from BM25
    fused = rrf_fused(q, window=10)
    assert np.count_nonzero(fused) == 10
    assert int(np.argmax(fused)) == 29  # the cosine's best


def test_dated_first_ranks_the_named_days_by_their_own_fusion() -> None:
    # Memory i was stored on 2023-05-(i+1); the question names 4 May: days 3-7 with one
    # day before and three after, i.e. memories 2..6.
    q = query(5, n=30)
    q.named = [(date(2023, 5, 4), date(2023, 5, 4))]
    fused = dated_first(q, rrf_fused(q), 1, 3, rrf=True)
    order = np.argsort(-fused, kind="stable")
    assert sorted(order[:5].tolist()) == [2, 3, 4, 5, 6]
    assert order[5] not in (2, 3, 4, 5, 6)
    q.named = [(date(1999, 5, 4), date(1999, 5, 4))]  # no memory from then: unchanged
    assert np.array_equal(dated_first(q, rrf_fused(q), 1, 3, rrf=True), rrf_fused(q))


def test_bm25_b_is_chosen_on_the_other_conversations_for_every_recall_together() -> None:
    from bench.recall_loco import B_GRID, choose_b

    def at(relevant_at: int, good_b: float) -> Query:
        # At good_b BM25 ranks the relevant memory first, at any other b last.
        q = query(relevant_at)
        q.cosines["static+expand"] = np.zeros(8)
        n = len(q.relevant)
        for b in B_GRID:
            order = np.arange(n) if b != good_b else np.roll(np.arange(n), -relevant_at)
            rank = np.empty(n, dtype=np.int64)
            rank[order] = np.arange(n)
            q.by_b[b] = (np.where(rank < n, 2.0 - rank / n, 0.0), rank)
        return q

    data = [("a", [at(7, 0.1)]), ("b", [at(7, 0.1)]), ("d", [at(7, 0.1)]), ("c", [at(7, 0.75)])]
    result = choose_b(data, minilm=False)
    assert result["chosen"] == {"a": 0.1, "b": 0.1, "d": 0.1, "c": 0.1}
    # Both recalls find a, b and d held out, and miss c: its own best b was not chosen.
    assert result["held_out"] == {"bm25": 0.75, "default": 0.75}
    assert result["in_sample"]["0.75"] == {"bm25": 0.25, "default": 0.25}
