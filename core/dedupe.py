"""Dedupe: is a candidate memory already known?

Two steps against the user's active memories:

1. exact match after :func:`core.text.normalize` (case, whitespace, final punctuation);
2. token-set Jaccard similarity ``|A ∩ B| / |A ∪ B|`` over lower-cased word tokens, at or above
   ``threshold`` (setting ``dedupe_threshold``, default 0.7).

A near-twin that differs in a negation, a number, a date word or a proper name carries new
information ("is allergic" vs "is not allergic", "7 years" vs "8 years") and is never a
duplicate, however high the Jaccard score.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from core.text import normalize, words


class HasText(Protocol):
    """What dedupe compares: a memory's text."""

    @property
    def text(self) -> str: ...


M = TypeVar("M", bound=HasText)

NEGATIONS = frozenset(
    """not no never none nobody nothing neither nor cannot cant dont doesnt didnt isnt wasnt
    arent werent wont wouldnt shouldnt couldnt hasnt havent hadnt without n t""".split()
)
NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
    ninety hundred thousand million billion first second third fourth fifth sixth seventh
    eighth ninth tenth once twice half dozen""".split()
)
DATE_WORDS = frozenset(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday
    saturday sunday today tomorrow yesterday weekend weekday morning evening night noon
    midnight spring summer autumn fall winter""".split()
)
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'-]*)")
_DIGITS = re.compile(r"\d")


def _proper_names(text: str) -> set[str]:
    """Capitalised words not at the start of a sentence, lower-cased."""
    return {m.group(1).casefold() for m in _CAPITALISED.finditer(text.strip())}


def jaccard(a: set[str], b: set[str]) -> float:
    """Token-set Jaccard similarity in [0, 1]; 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def carries_new_information(candidate: str, known: str) -> bool:
    """True when the two texts differ in a negation, number, date word or proper name."""
    a, b = set(words(candidate)), set(words(known))
    diff = a ^ b
    if diff & NEGATIONS or diff & NUMBER_WORDS or diff & DATE_WORDS:
        return True
    if any(_DIGITS.search(tok) for tok in diff):
        return True
    names = _proper_names(candidate) ^ _proper_names(known)
    return bool(names & diff)


@dataclass(frozen=True, slots=True)
class Deduper:
    """Decides whether a candidate text duplicates one of the known memories."""

    threshold: float = 0.7

    def match(self, text: str, known: Iterable[M]) -> M | None:
        """The known memory ``text`` duplicates, or None when it is new information.

        ``known`` holds anything with a ``text`` (stored memories, or id/text rows).
        """
        norm = normalize(text)
        tokens = set(words(text))
        best: tuple[float, M] | None = None
        for memory in known:
            if normalize(memory.text) == norm:
                return memory
            score = jaccard(tokens, set(words(memory.text)))
            if (
                score >= self.threshold
                and (best is None or score > best[0])
                and not carries_new_information(text, memory.text)
            ):
                best = (score, memory)
        return best[1] if best else None
