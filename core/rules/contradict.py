"""Contradictions between two active memories that dedupe keeps apart: "The user lives in
Paris." and, later, "The user lives in Berlin."; "The user prefers dark mode." and "The user
prefers light mode."; "The user prefers tabs over spaces." and "The user prefers spaces
over tabs.". Dedupe calls each pair *distinct* (information on both sides, or the opposite
direction): a correction said without a word of change ("I live in Berlin") leaves both
active, and a prompt carrying both tells the model two things at once.

The rule (:func:`contradiction_key`) gives a memory a **key** when it states a value that
can hold only once for its subject; two memories with the same key and different values
contradict each other:

* a **single-valued slot**: the same subject (the user, "the user's manager", a name) with
  one of :data:`SLOTS` ("lives in", "works at", "time zone is", "name is", "favourite ...
  is", "main language is" ...; "lives in" and "is based in" are one slot) and a different
  first word after it ("Paris" / "Berlin"; "Lisbon" / "Lisbon with his wife" agree);
* a **one-of pair** (:data:`OPPOSITES`: dark/light, tabs/spaces, concise/detailed ...): the
  same sentence but for a word and its opposite;
* a **preference order**: "prefers A over/to B" against "prefers B over/to A".

A memory about another person never contradicts one about the user (the subject is part of
the key); dated memories are not judged (a past trip and a new one are both true). Resolved
newest first (:func:`newest_first`): the prompt carries the newer memory only, and the
audit lists the older as ``contradicted`` (:mod:`core.memory.audit`). English only, and
only these forms: other contradictions take a model (``memories cleanup``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeVar

from core.types import Memory

SLOTS = (
    r"lives in|lives near|is based in|is located in|resides in|"
    r"works at|works for|is employed by|is employed at|works as|"
    r"time ?zone is|is in the [\w/+-]+ time ?zone|"
    r"name is|is called|is named|goes by|"
    r"(?:main|primary|first|native) language is|"
    r"(?:favou?rite|preferred|main|primary|default) [\w -]{1,30}? is|"
    r"pronouns are|birthday is|is married to|is engaged to"
)
_SLOT = re.compile(
    rf"^(?P<subject>.{{1,80}}?)\s+(?P<slot>{SLOTS})(?:\s+(?P<value>.+?))?[.!]?$", re.IGNORECASE
)
_SAME_SLOT = (
    (re.compile(r"^(lives in|is based in|is located in|resides in)$"), "home"),
    (re.compile(r"^(works at|works for|is employed by|is employed at)$"), "employer"),
    (re.compile(r"^(name is|is called|is named|goes by)$"), "name"),
    (re.compile(r"^(time ?zone is|is in the .* time ?zone)$"), "time zone"),
)
OPPOSITES: dict[str, str] = {
    "dark": "light",
    "light": "dark",
    "tabs": "spaces",
    "spaces": "tabs",
    "concise": "detailed",
    "detailed": "concise",
    "short": "long",
    "long": "short",
    "formal": "informal",
    "informal": "formal",
    "casual": "formal",
    "morning": "evening",
    "evening": "morning",
    "mornings": "evenings",
    "evenings": "mornings",
    "metric": "imperial",
    "imperial": "metric",
    "celsius": "fahrenheit",
    "fahrenheit": "celsius",
}
_ORDER = re.compile(
    r"^(?P<subject>.{1,80}?)\s+(?P<verb>prefers?|likes?)\s+(?P<a>[\w .+#-]{1,40}?)\s+"
    r"(?:over|to|rather than|instead of)\s+(?P<b>[\w .+#-]{1,40}?)[.!]?$",
    re.IGNORECASE,
)
_WORD = re.compile(r"[\w']+|[^\w\s]")
_SLOT_HINT = re.compile(
    r"\b(?:lives|based|located|resides|works|employed|zone|name|called|named|goes by|"
    r"language|favou?rite|preferred|main|primary|default|pronouns|birthday|married|engaged)\b",
    re.IGNORECASE,
)
_ORDER_HINT = re.compile(r"\b(?:over|to|rather than|instead of)\b", re.IGNORECASE)
_OPPOSITE_HINT = re.compile(rf"\b(?:{'|'.join(OPPOSITES)})\b", re.IGNORECASE)
KEY_CACHE = 65_536
"""Texts whose keys are kept (a turn reads the same memories as the turn before)."""


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


@lru_cache(maxsize=KEY_CACHE)
def contradiction_key(text: str) -> tuple[str, str] | None:
    """``(key, value)`` of a memory's text: two texts with the same key and different
    values contradict each other; None when the text states nothing of that form. Cached
    (:data:`KEY_CACHE` texts): about 30 µs a text the first time."""
    m = _ORDER.match(text.strip()) if _ORDER_HINT.search(text) else None
    if m:
        a, b = _norm(m.group("a")), _norm(m.group("b"))
        pair = "|".join(sorted((a, b)))
        return f"order:{_norm(m.group('subject'))}:{pair}", f"{a}>{b}"
    m = _SLOT.match(text.strip()) if _SLOT_HINT.search(text) else None
    if m:
        slot = _norm(m.group("slot"))
        value = _norm(m.group("value") or "")
        if slot.startswith("is in the "):  # "is in the PST time zone"
            value = slot.removeprefix("is in the ").rsplit(" ", 1)[0].removesuffix(" time")
        for pattern, name in _SAME_SLOT:
            if pattern.match(slot):
                slot = name
                break
        if not value:
            return None
        value = value.split()[0].strip(",;")  # "Lisbon with his wife" still says Lisbon
        subject = _norm(m.group("subject")).removesuffix("'s")
        return f"slot:{subject}:{slot}", value
    if not _OPPOSITE_HINT.search(text):
        return None
    words = _WORD.findall(_norm(text))
    flips = [i for i, w in enumerate(words) if w in OPPOSITES]
    if len(flips) == 1:
        i = flips[0]
        canon = "/".join(sorted((words[i], OPPOSITES[words[i]])))
        key = " ".join([*words[:i], f"<{canon}>", *words[i + 1 :]])
        return f"pair:{key}", words[i]
    return None


def contradicts(newer: str, older: str) -> bool:
    """True when ``newer`` and ``older`` state different values of one key
    (:func:`contradiction_key`)."""
    a, b = contradiction_key(newer), contradiction_key(older)
    return a is not None and b is not None and a[0] == b[0] and a[1] != b[1]


M = TypeVar("M", bound=Memory)


def contradicted(memories: Sequence[Memory]) -> dict[int, int]:
    """``{older id: newer id}`` for each of ``memories`` a newer one among them contradicts
    (undated ones only; newer: the larger ``created_at``, then id). Linear in the memories:
    each text's key is computed once."""
    latest: dict[str, tuple[str, Memory]] = {}
    out: dict[int, int] = {}
    ordered = sorted(memories, key=lambda m: (m.created_at, m.id), reverse=True)
    for m in ordered:
        if m.valid_from is not None or m.valid_until is not None:
            continue
        found = contradiction_key(m.text)
        if found is None:
            continue
        key = f"{m.about or ''}\x00{found[0]}"
        if key in latest:
            value, newer = latest[key]
            if value != found[1]:
                out[m.id] = newer.id
        else:
            latest[key] = (found[1], m)
    return out


def newest_first(memories: Sequence[M]) -> list[M]:
    """``memories`` without those a newer one among them contradicts (:func:`contradicted`),
    in their order."""
    gone = contradicted(memories)
    return [m for m in memories if m.id not in gone] if gone else list(memories)
