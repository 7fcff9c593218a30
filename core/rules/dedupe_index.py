"""Dedupe of many memories at once (an import): every candidate that the Jaccard screen of
:class:`core.rules.dedupe.Deduper` could pass (over :func:`core.rules.dedupe.screen_tokens`,
the stems the screen compares), found without comparing all pairs.

Prefix filtering (Chaudhuri, Ganti and Kaushik, "A Primitive Operator for Similarity Joins in
Data Cleaning", ICDE 2006; Bayardo, Ma and Srikant, "Scaling Up All Pairs Similarity Search",
WWW 2007): order every token from rarest to most common. If ``J(A, B) >= t`` then
``|A ∩ B| >= ceil(t * max(|A|, |B|))``, so the first ``|A| - ceil(t |A|) + 1`` tokens of A and
the first ``|B| - ceil(t |B|) + 1`` tokens of B share one. Each memory is indexed by its own
prefix and a new text probes with its prefix: the candidates are a superset of every memory
at or above the threshold. One shortcut keeps it linear: a prefix token held by more than
``LONG_LIST`` memories is not probed when a rarer one is, so a twin that shares with the
new text none of its rarer prefix tokens, only common ones, is missed (the store's own path
is bounded the same way: it compares the 50 best BM25 neighbours). The decision itself stays
:meth:`Deduper.match` (exact normalised text first, then the Jaccard screen and the guards).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.rules.dedupe import Decision, Deduper, info_words, screen_tokens
from core.rules.text import normalize

LONG_LIST = 256
"""A prefix token held by more memories than this is skipped when the text has a rarer one
(a common word such as "mornings" in a large import would make the lookup quadratic)."""


@dataclass(frozen=True, slots=True)
class Known:
    """A memory as the index holds it: ``id`` is the stored id, or None for one not yet
    stored (an earlier line of the same import)."""

    id: int | None
    text: str


class DedupeIndex:
    """Near-duplicate lookup over a fixed vocabulary order.

    ``texts`` are all the texts the index will ever see (known and new), used once to order
    the tokens by document frequency; ``add`` then ``match`` in any order.
    """

    def __init__(self, deduper: Deduper, texts: Iterable[str]) -> None:
        self._deduper = deduper
        freq: Counter[str] = Counter()
        for text in texts:
            freq.update(screen_tokens(text))
        # Rarest first; ties by the token itself so the order is total.
        self._rank = {t: i for i, t in enumerate(sorted(freq, key=lambda t: (freq[t], t)))}
        self._by_token: dict[str, list[tuple[int, tuple[Known, frozenset[str]]]]] = {}
        self._by_norm: dict[str, Known] = {}
        self._by_norm_all: dict[str, list[tuple[int, Known]]] = {}
        self._empty: list[tuple[int, tuple[Known, frozenset[str]]]] = []
        self._added = 0

    def _prefix(self, tokens: frozenset[str]) -> list[str]:
        ordered = sorted(tokens, key=lambda t: self._rank.get(t, -1))
        overlap = math.ceil(self._deduper.threshold * len(tokens) - 1e-9)
        return ordered[: len(ordered) - max(overlap, 1) + 1]

    def add(self, known: Known) -> None:
        """Index ``known`` (its norm and its prefix tokens)."""
        norm = normalize(known.text)
        order = self._added
        self._added += 1
        self._by_norm.setdefault(norm, known)
        self._by_norm_all.setdefault(norm, []).append((order, known))
        tokens = frozenset(screen_tokens(known.text))
        entry = (order, (known, tokens))
        prefix = self._prefix(tokens)
        if not prefix:
            self._empty.append(entry)
        for token in prefix:
            self._by_token.setdefault(token, []).append(entry)

    def match(self, text: str) -> Known | None:
        """The indexed memory ``text`` duplicates (:meth:`Deduper.match`), or None."""
        return self.decide(text).duplicate_of

    def decide(self, text: str) -> Decision[Known]:
        """What ``text`` is to the indexed memories (:meth:`Deduper.decide`): the one it
        duplicates, or the ones it is a more specific fact of."""
        twin = self._by_norm.get(normalize(text))
        if twin is not None:
            return Decision(twin)
        passed = self.candidates(text)
        return self._deduper.decide(text, passed) if passed else Decision(None)

    def candidates(self, text: str) -> list[Known]:
        """The indexed memories whose Jaccard screen with ``text`` passes (the exact twin
        included), in the order they were added."""
        tokens = frozenset(screen_tokens(text))
        prefix = self._prefix(tokens)
        lists = [self._by_token.get(t, []) for t in prefix] if prefix else [self._empty]
        short = [entries for entries in lists if len(entries) <= LONG_LIST]
        lists = short or lists[:1]
        # The Jaccard screen on cached token sets (|A ∩ B| / (|A| + |B| - |A ∩ B|)).
        threshold, size = self._deduper.threshold, len(tokens)
        passed: dict[int, tuple[int, Known]] = {}
        for entries in lists:
            for order, (known, other) in entries:
                common = len(tokens & other)
                if common >= threshold * (size + len(other) - common) - 1e-9:
                    passed.setdefault(id(known), (order, known))
        norm = normalize(text)
        for order, known in self._by_norm_all.get(norm, []):
            passed.setdefault(id(known), (order, known))
        return [known for _, known in sorted(passed.values(), key=lambda p: p[0])]


def redundant(texts: Sequence[str], deduper: Deduper) -> set[int]:
    """The positions in ``texts`` (oldest first) that another text of the list stands for:
    ``i`` is redundant when it adds nothing to some ``j`` (:meth:`Deduper.judge` of ``i``
    against ``j`` is a duplicate) and ``j`` is newer, or ``i`` is only the general fact of
    ``j`` (reason ``general``: the specific one says all it says, whatever their ages). A
    text already redundant stands for nothing, so of two or more twins exactly the newest
    stays.

    Only pairs where every information word of ``i`` is in ``j`` can be duplicates
    (:func:`core.rules.dedupe.info_words`), so ``i`` is judged only against the texts
    holding its rarest information word (an inverted index): about a millisecond for 200
    memories, where judging all pairs took 300 (``redundant``'s test)."""
    infos = [info_words(t) for t in texts]
    freq: Counter[str] = Counter(w for info in infos for w in info)
    posting: dict[str, list[int]] = {}
    for j, info in enumerate(infos):
        for w in info:
            posting.setdefault(w, []).append(j)
    dropped: set[int] = set()
    for i in range(len(texts) - 1, -1, -1):  # newest first: a newer twin is judged first
        if not infos[i]:
            continue
        rarest = min(infos[i], key=lambda w: (freq[w], w))
        for j in posting[rarest]:
            if j == i or j in dropped or not infos[i] <= infos[j]:
                continue
            judgement = deduper.judge(texts[i], texts[j])
            if judgement.outcome == "duplicate" and (j > i or judgement.reason == "general"):
                dropped.add(i)
                break
    return dropped
