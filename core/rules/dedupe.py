"""Dedupe: is a candidate memory already known?

A candidate duplicates a known memory when

1. both are equal after :func:`core.rules.text.normalize` (case, whitespace, final punctuation); or
2. the **screen** passes: Jaccard similarity ``|A ∩ B| / |A ∪ B|`` of the two texts' sets of
   Snowball stems (:func:`core.rules.text.stems`) is at or above ``threshold`` (setting
   ``dedupe_threshold``, default :data:`DEFAULT_THRESHOLD` = 0.55), **and** what differs
   between them carries no information (:func:`difference` returns None).

Why the rule is shaped so. A memory is one short sentence, so two memories about different
things share most of their words: "The user is allergic to peanuts." and "... to shellfish."
score 0.71 on word tokens. A similarity threshold alone therefore merges different facts (a
user's shellfish allergy silently dropped), and no threshold separates them from true
rewordings, whose scores are just as high. What does separate them is *what* differs:

- a content word (a stem outside :data:`core.rules.text.STOP_WORDS`) found on each side but not
  the other is a **substitution**: peanuts/shellfish, dark/light, Go/Rust, tea/coffee,
  Fridays/Mondays, Berlin/Munich. A different fact, never merged;
- words found on one side only are a **qualifier** added or dropped ("editor" vs "code
  editor", "severely allergic"): the same fact, merged. So are stop words, word order and
  inflections, which the stem sets do not see;
- a few kinds of word change the fact even when only one side has them, and are guards:
  negation ("not", "never"; "doesn't" counts as "does not"), numbers (digits and number
  words; "7" counts as "seven"), dates (months, weekdays, parts of the day), proper names
  (capitalised inside the sentence: "sister Anna"), relations (before/after, over/under,
  near, more/less, "every other"), modality and change over time ("used to", "stopped",
  "wants to", "might", "previously"), a preposition swapped for another ("works with
  Alice" vs "works for Alice"), a new list item ("peanuts" vs "peanuts and shellfish") or
  clause ("has a dog" vs "has a dog that fears thunder"), and the same words in the
  opposite direction ("tabs over spaces" vs "spaces over tabs", "from Berlin to Munich" vs
  "from Munich to Berlin").

Erring on the side of "distinct" costs one near-twin row that a cleanup can merge later; a
false merge loses what the user said and tells them "I already knew that". The guards are
shaped for that asymmetry: synonyms ("likes"/"enjoys"), irregular verbs ("keeps"/"kept") and
spelling variants stay apart. With the guards in place the screen only bounds how much a
qualifier may add, so it sits lower than the 0.7 that plain Jaccard needed.

Measured on the labelled pairs shipped in ``core/data/dedupe_pairs.jsonl`` by
:mod:`core.evaluation.dedupe` (``python bench/dedupe.py``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol, TypeVar

from core.rules.text import STOP_WORDS, normalize, stem, words


class HasText(Protocol):
    """What dedupe compares: a memory's text."""

    @property
    def text(self) -> str: ...


class HasIdText(Protocol):
    """A stored memory as dedupe sees it: its id and text."""

    @property
    def id(self) -> int: ...

    @property
    def text(self) -> str: ...


M = TypeVar("M", bound=HasText)
R = TypeVar("R", bound=HasIdText)

NEGATIONS = frozenset(
    """not no never none nobody nothing neither nor cannot cant dont doesnt didnt isnt wasnt
    arent werent wont wouldnt shouldnt couldnt hasnt havent hadnt without n t""".split()
)
NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
    ninety hundred thousand million billion first second third fourth fifth sixth seventh
    eighth ninth tenth once twice half dozen single double""".split()
)
DATE_WORDS = frozenset(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday
    saturday sunday today tomorrow yesterday tonight weekend weekday morning afternoon evening
    night noon midnight spring summer autumn fall winter""".split()
)
# One-sided, these still change the fact: position, comparison, frequency.
RELATION_WORDS = frozenset(
    """before after above below over under up down off out against more less least fewer
    than during until since near far inside outside behind beyond beneath instead rather
    versus vs early earlier late later other except""".split()
)
# One-sided, these change a fact's truth or time: a plan, a wish, a habit given up.
MODALITY_WORDS = frozenset(
    """stop stopped quit quitting start started began begin former formerly previously ex
    anymore longer might maybe perhaps possibly probably plan plans planning want wants wish
    hope hopes considering consider try tries tried trying attempt should could would
    someday eventually""".split()
)
# Swapped for one another, these change the relation ("works with" vs "works for").
PREPOSITIONS = frozenset(
    """about at by for from in into of on onto to toward towards upon with within via per
    among between through""".split()
)
# A one-sided addition holding one of these adds an item to a list, not a qualifier.
COORDINATORS = frozenset("and or plus nor both along well".split())
# ... and one holding one of these adds a clause: "has a dog" vs "has a dog that fears thunder".
CLAUSE_WORDS = frozenset(
    "that which who whom whose where when because but while although though unless if".split()
)
# Words whose neighbours have a direction: "tabs over spaces", "from Berlin to Munich".
_DIRECTED_NEXT = frozenset("from to into over than instead rather versus vs".split())
_DIRECTED_PREV = frozenset("over than instead rather versus vs".split())
_DIRECTED = _DIRECTED_NEXT | _DIRECTED_PREV

# The screen's default: the highest threshold reaching the best duplicate recall with no
# false merge on the tune split of the labelled pairs (bench/dedupe.py; 0.7 before issue 14).
DEFAULT_THRESHOLD = 0.55

_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'-]*)")
_DIGITS = re.compile(r"\d")

Reason = Literal[
    "negation",
    "number",
    "date",
    "name",
    "relation",
    "modality",
    "preposition",
    "substitution",
    "coordination",
    "clause",
    "order",
]


def _stemmed(vocabulary: frozenset[str]) -> frozenset[str]:
    return frozenset(stem(w) for w in vocabulary)


_DATE_STEMS = _stemmed(DATE_WORDS)
# Cardinal number words as digits, so "7 years" and "seven years" state the same number.
_CARDINALS = (
    {
        w: str(i)
        for i, w in enumerate(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
            " fifteen sixteen seventeen eighteen nineteen twenty".split()
        )
    }
    | {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70"}
    | {"eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000", "dozen": "12"}
)
# Contracted negations ("doesn't" -> "doesn" "t") count as "not", so "doesn't eat" and
# "does not eat" carry the same negation.
_NOT = frozenset("not t n nt cannot cant dont doesnt didnt isnt wasnt arent werent wont".split())
_NOT |= frozenset("wouldnt shouldnt couldnt hasnt havent hadnt".split())


@dataclass(frozen=True, slots=True)
class _Parsed:
    words: tuple[str, ...]
    stems: tuple[str, ...]
    stem_set: frozenset[str]
    content: frozenset[str]  # stems of non-stop words
    names: frozenset[str]  # stems of capitalised words inside the sentence
    markers: frozenset[str]  # multi-word markers: "used to"
    negations: tuple[str, ...]  # negation words, sorted, contractions as "not"
    numbers: frozenset[str]  # digit tokens and number words (cardinals as digits)
    seq: tuple[str, ...]  # content stems and "@"-marked directed words, in order


@lru_cache(maxsize=8192)
def _parse(text: str) -> _Parsed:
    toks = tuple(words(text))
    sts = tuple(stem(w) for w in toks)
    numeric = {w for w in toks if w in NUMBER_WORDS or _DIGITS.search(w)}
    content = frozenset(
        s for w, s in zip(toks, sts, strict=True) if w not in STOP_WORDS and w not in numeric
    )
    negations = tuple(sorted("not" if w in _NOT else w for w in toks if w in NEGATIONS))
    numbers = frozenset(_CARDINALS.get(w, w) for w in numeric)
    names = frozenset(stem(w) for m in _CAPITALISED.finditer(text.strip()) for w in words(m[1]))
    markers = frozenset(
        "used to" for i in range(len(toks) - 1) if toks[i] == "used" and toks[i + 1] == "to"
    )
    seq = tuple(
        "@" + w if w in _DIRECTED else s
        for w, s in zip(toks, sts, strict=True)
        if w in _DIRECTED or w not in STOP_WORDS
    )
    return _Parsed(toks, sts, frozenset(sts), content, names, markers, negations, numbers, seq)


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    """Token-set Jaccard similarity in [0, 1]; 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def screen_tokens(text: str) -> frozenset[str]:
    """The token set the Jaccard screen compares: the Snowball stems of ``text``'s words."""
    return frozenset(_parse(text).stem_set)


def similarity(a: str, b: str) -> float:
    """The screen's score: Jaccard of the two texts' Snowball stem sets, in [0, 1]."""
    return jaccard(_parse(a).stem_set, _parse(b).stem_set)


def difference(candidate: str, known: str) -> Reason | None:
    """Why ``candidate`` says something ``known`` does not, or None when what differs
    carries no information (a qualifier, stop words, word order, inflections).

    Symmetric: ``difference(a, b)`` and ``difference(b, a)`` agree on None-ness.
    """
    a, b = _parse(candidate), _parse(known)
    diff_words = set(a.words) ^ set(b.words)
    diff = a.stem_set ^ b.stem_set
    # Words on one side whose stem is missing on the other (not mere inflections).
    changed = {w for w in diff_words if stem(w) in diff}
    if a.negations != b.negations:
        return "negation"
    if a.numbers != b.numbers:
        return "number"
    if diff & _DATE_STEMS:
        return "date"
    if (a.names ^ b.names) & diff:
        return "name"
    if changed & RELATION_WORDS:
        return "relation"
    if changed & MODALITY_WORDS or a.markers != b.markers:
        return "modality"
    only_a, only_b = set(a.words) - set(b.words), set(b.words) - set(a.words)
    if only_a & PREPOSITIONS and only_b & PREPOSITIONS:
        return "preposition"
    extra_a, extra_b = a.content - b.content, b.content - a.content
    if extra_a and extra_b:
        return "substitution"
    if (extra_a and only_a & COORDINATORS) or (extra_b and only_b & COORDINATORS):
        return "coordination"
    if (extra_a and only_a & CLAUSE_WORDS) or (extra_b and only_b & CLAUSE_WORDS):
        return "clause"
    if _directions(a, b) != _directions(b, a):
        return "order"
    return None


def _directions(a: _Parsed, b: _Parsed) -> set[tuple[str, str, str]]:
    """The neighbours of ``a``'s directed words that both texts have: ("over", "->",
    "space") for "tabs over spaces"; only words ``b`` has as well count."""
    shared = a.content & b.content
    both = {x for x in a.seq if x[0] == "@"} & {x for x in b.seq if x[0] == "@"}
    seq = [x for x in a.seq if x in shared or x in both]
    out = set()
    for i, x in enumerate(seq):
        if x not in both:
            continue
        word = x[1:]
        nxt = next((y for y in seq[i + 1 :] if y[0] != "@"), "")
        prev = next((y for y in reversed(seq[:i]) if y[0] != "@"), "")
        if word in _DIRECTED_NEXT:
            out.add((word, "->", nxt))
        if word in _DIRECTED_PREV:
            out.add((word, "<-", prev))
    return out


def carries_new_information(candidate: str, known: str) -> bool:
    """True when what differs between the two texts is information (see :func:`difference`)."""
    return difference(candidate, known) is not None


def is_duplicate(candidate: str, known: str, threshold: float = DEFAULT_THRESHOLD) -> bool:
    """The whole rule for one pair: equal after normalisation, or the screen at
    ``threshold`` passes and nothing that differs carries information."""
    if normalize(candidate) == normalize(known):
        return True
    return similarity(candidate, known) >= threshold and difference(candidate, known) is None


@dataclass(frozen=True, slots=True)
class Deduper:
    """Decides whether a candidate text duplicates one of the known memories.

    ``threshold`` is the screen's minimum stem-set Jaccard, in (0, 1].
    """

    threshold: float = DEFAULT_THRESHOLD

    def match(self, text: str, known: Iterable[M]) -> M | None:
        """The known memory ``text`` duplicates (the most similar one), or None when it is
        new information.

        ``known`` holds anything with a ``text`` (stored memories, or id/text rows).
        """
        norm = normalize(text)
        best: tuple[float, M] | None = None
        for memory in known:
            if normalize(memory.text) == norm:
                return memory
            score = similarity(text, memory.text)
            if (
                score >= self.threshold
                and (best is None or score > best[0])
                and difference(text, memory.text) is None
            ):
                best = (score, memory)
        return best[1] if best else None

    def resolve(
        self, text: str, known: Iterable[R], *, replacing: Collection[int] = ()
    ) -> R | None:
        """:meth:`match` for a candidate that supersedes the memories whose ids are in
        ``replacing``: supersede comes before dedupe, so those are not compared (a
        correction is never discarded as a duplicate of what it corrects). The one
        exception is a replaced memory with the same text after normalisation, which is
        returned: replacing a memory by its own words changes nothing.
        """
        rows = list(known)
        norm = normalize(text)
        for row in rows:
            if row.id in replacing and normalize(row.text) == norm:
                return row
        return self.match(text, [row for row in rows if row.id not in replacing])
