"""Okapi BM25 over one user's memories: the ranking every store backend shares.

Both stores pick candidates with their own index (SQLite: FTS5 ``bm25()``; PostgreSQL: a
GIN-indexed ``tsvector``) and hand them to :func:`rescore`, which ranks them with the user's
own statistics, so the two backends cannot drift apart:

``score(d) = sum over query terms t in d of idf(t) * f(t, d) * (k1 + 1)
/ (f(t, d) + k1 * (1 - b + b * |d| / avgdl))``

with ``f(t, d)`` the count of ``t`` in ``d``, ``|d|`` the document's term count, ``avgdl``
and ``N`` over the user's active memories (Robertson and Zaragoza, "The Probabilistic
Relevance Framework: BM25 and Beyond", 2009).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BM25_K1 = 1.2
"""Okapi BM25 term-frequency saturation; FTS5's value (Robertson and Zaragoza, 2009)."""
BM25_B = 0.1
"""Okapi BM25 length normalisation, low. ``b`` models verbosity, a longer document saying
the same more often (Robertson and Zaragoza 2009, section 3.4.1); a memory is one sentence
under 200 characters, so a longer one mostly says more (scope), and FTS5's 0.75 ranked short
generic memories ("Jon runs a dance studio.") above the specific ones a question asks for.
Not 0: memories matching the same query words once each would tie exactly, and a little
normalisation orders them shorter first. Chosen leave-one-conversation-out on LoCoMo from
0, 0.1, 0.2, 0.3, 0.5 and 0.75 by the hits of BM25 alone, the default and the semantic extra
together: 0.1 in every fold (docs/benchmarks.md, Recall)."""


def candidate_pool(k: int, pool: int | None = None) -> int:
    """How many index candidates are re-scored for a top-``k`` recall: ``pool`` when the
    caller names one (score fusion reads a list deeper than the top it needs from the pool of
    that top), else ``max(10 * k, 60)``; never fewer than ``k``."""
    return max(k, max(10 * k, 60) if pool is None else pool)


def bm25_idf(n_docs: int, doc_freq: int) -> float:
    """IDF ``ln(1 + (N - n + 0.5) / (n + 0.5))`` (Lucene's BM25 variant; always positive).

    Okapi's plain ``ln((N - n + 0.5) / (n + 0.5))`` (FTS5's, floored at 1e-6) gives zero to
    any term in half of the documents, which flattens ranking for users with few memories.
    """
    return math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def rescore(
    candidates: Iterable[Sequence[Any]],
    doc_freqs: Mapping[str, int],
    *,
    n_docs: int,
    total_len: int,
) -> list[tuple[float, int]]:
    """Okapi BM25 of each candidate, best first (ties: the newer id first).

    ``candidates``: rows ``(memory id, index terms joined by spaces, term count)``;
    ``doc_freqs``: the user's document frequency of each query term (terms with none may be
    left out); ``n_docs`` and ``total_len``: the user's active memories and the sum of their
    term counts. Returns ``(score, memory id)`` pairs.
    """
    avgdl = total_len / n_docs if n_docs and total_len else 1.0
    # Terms in sorted order: the same float sums whichever order a backend lists them in.
    idf = {t: bm25_idf(n_docs, df) for t, df in sorted(doc_freqs.items()) if df > 0}
    scores = []
    weights = list(idf.items())
    for memory_id, doc_terms, length, *_ in candidates:
        # Counting only the query's terms (list.count, in C) is 3-4x faster than a Counter
        # of the whole document, with the same sums in the same order.
        words = doc_terms.split()
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl)
        score = 0.0
        for term, weight in weights:
            f = words.count(term)
            if f:
                score += weight * f * (BM25_K1 + 1) / (f + norm)
        scores.append((score, memory_id))
    scores.sort(key=lambda s: (-s[0], -s[1]))
    return scores
