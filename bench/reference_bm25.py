"""The reference ranker: pure-Python Okapi BM25 as the original prototype did it.

k1 = 1.5, b = 0.75, lowercase ``[a-z0-9]+`` tokens, IDF ``ln((N - n + 0.5) / (n + 0.5) + 1)``,
and all of the user's memories re-tokenised for every query (no index).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"[a-z0-9]+")
K1 = 1.5
B = 0.75


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def rank(query: str, docs: Sequence[str], k: int) -> list[tuple[int, float]]:
    """Indices of the best ``k`` of ``docs`` for ``query`` with their scores, best first."""
    tokenized = [tokenize(d) for d in docs]
    n = len(tokenized)
    if n == 0:
        return []
    avgdl = sum(len(t) for t in tokenized) / n
    df: Counter[str] = Counter()
    for toks in tokenized:
        df.update(set(toks))
    q = set(tokenize(query))
    idf = {t: math.log((n - df[t] + 0.5) / (df[t] + 0.5) + 1) for t in q if df[t]}
    scores = []
    for i, toks in enumerate(tokenized):
        tf = Counter(toks)
        dl = len(toks)
        s = 0.0
        for t, w in idf.items():
            f = tf.get(t, 0)
            if f:
                s += w * f * (K1 + 1) / (f + K1 * (1 - B + B * dl / avgdl))
        if s > 0:
            scores.append((i, s))
    scores.sort(key=lambda x: -x[1])
    return scores[:k]
