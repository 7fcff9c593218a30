"""Synthetic memories for the bulk benchmarks: realistic shape (one third-person sentence,
8 to 14 words, a shared everyday vocabulary plus rarer made-up names), seeded."""

from __future__ import annotations

import json
import random

_CV = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
_TEMPLATES = (
    "The user prefers {a} {b} over {c} when working on {d}.",
    "The user lives near {a} and cycles to {b} on {c} mornings.",
    "The user's colleague {a} maintains the {b} service written in {c}.",
    "The user is allergic to {a} and avoids {b} at {c} restaurants.",
    "The user plans a trip to {a} with {b} in the {c} season.",
    "The user uses {a} for {b} and keeps notes about {c} in {d}.",
)


def vocabulary(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct pronounceable made-up words (2 to 3 syllables)."""
    rnd = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault("".join(rnd.choice(_CV) for _ in range(rnd.randint(2, 3))), None)
    return list(seen)


def sentences(n: int, *, seed: int = 1, vocab: int = 3000) -> list[str]:
    """``n`` distinct memory sentences."""
    rnd = random.Random(seed)
    words = vocabulary(vocab)
    out: dict[str, None] = {}
    while len(out) < n:
        t = rnd.choice(_TEMPLATES)
        s = t.format(
            a=rnd.choice(words), b=rnd.choice(words), c=rnd.choice(words), d=rnd.choice(words)
        )
        out.setdefault(s[0].upper() + s[1:], None)
    return list(out)


def jsonl(texts: list[str]) -> list[str]:
    """Import lines for ``texts``."""
    return [json.dumps({"text": t, "kind": "fact", "category": "general"}) for t in texts]
