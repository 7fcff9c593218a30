"""Scoring stored memories against LoCoMo's observations without a judge (``--offline-match``).

Observations name the person ("Caroline attended a support group"); memories say "the user".
:func:`as_user` maps the person's name to "the user" before comparing.

The similarity rule (reported with every offline run, :data:`OFFLINE_RULE`): content terms
are Snowball stems without stop words (:func:`core.rules.text.stems`), less the words that name
the person ("user", their name). ``containment(a, b)`` is the share of ``a``'s terms that
are also in ``b``.

- an observation is **covered** when some memory contains at least :data:`COVER_AT` of its
  terms (containment of the observation in the memory);
- a memory is **supported** when at least :data:`SUPPORT_AT` of its terms are contained in one
  observation of the person or in one of the person's own turns of the session, and that
  best source is not beaten by one of the other speaker's turns (a memory made of the other
  speaker's words is not supported by the person's turn that merely shares a few words).

Thresholds were set by reading the synthetic fixture and a LoCoMo slice, not tuned on a
labelled set: a judge run is the measure; the offline rule is for runs without one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.rules.text import stems

COVER_AT = 0.6
SUPPORT_AT = 0.6
OFFLINE_RULE = (
    f"offline match: observation covered when a memory contains >= {COVER_AT:.0%} of its "
    f"content stems; memory supported when >= {SUPPORT_AT:.0%} of its stems are in one "
    "observation or one own turn, not beaten by an other-speaker turn"
)


def as_user(text: str, name: str) -> str:
    """``text`` with the person's ``name`` (and ``name's``) replaced by "the user"."""
    if not name:
        return text
    pattern = re.compile(rf"\b{re.escape(name)}(['’]s)?\b")

    def swap(match: re.Match[str]) -> str:
        start = match.start() == 0 or text[: match.start()].rstrip().endswith((".", "!", "?"))
        base = "The user" if start else "the user"
        return base + ("'s" if match.group(1) else "")

    return pattern.sub(swap, text)


def terms(text: str, name: str = "") -> frozenset[str]:
    """Content stems of ``text`` without the words that name the person."""
    drop = {"user", "the"} | set(stems(name))
    return frozenset(s for s in stems(text, drop_stop_words=True) if s not in drop)


def containment(a: frozenset[str], b: frozenset[str]) -> float:
    """Share of ``a`` contained in ``b`` (0.0 when ``a`` is empty)."""
    return len(a & b) / len(a) if a else 0.0


@dataclass(frozen=True)
class SessionScore:
    """Scores of one speaker's memories after one session.

    ``covered``: observations stated by a memory (of ``observations``); ``supported``: new
    memories grounded in the person's words (of ``new_memories``); ``from_other``: new
    memories best matched by the other speaker's turns.
    """

    observations: int
    covered: int
    new_memories: int
    supported: int
    from_other: int = 0


def offline_score(
    *,
    name: str,
    observations: Sequence[str],
    memories: Sequence[str],
    new_memories: Sequence[str],
    own_turns: Sequence[str],
    other_turns: Sequence[str],
) -> SessionScore:
    """Score one speaker's session with the rule in the module docstring.

    ``observations`` are the human observations of the person (their name in them),
    ``memories`` every active memory, ``new_memories`` those stored during the session.
    """
    obs_terms = [terms(as_user(o, name), name) for o in observations]
    mem_terms = [terms(m, name) for m in memories]
    covered = sum(
        1 for o in obs_terms if o and any(containment(o, m) >= COVER_AT for m in mem_terms)
    )
    own = [terms(t, name) for t in own_turns] + obs_terms
    other = [terms(t, name) for t in other_turns]
    supported = from_other = 0
    for text in new_memories:
        m = terms(text, name)
        best_own = max((containment(m, src) for src in own), default=0.0)
        best_other = max((containment(m, src) for src in other), default=0.0)
        if best_own >= SUPPORT_AT and best_own >= best_other:
            supported += 1
        elif best_other > best_own:
            from_other += 1
    return SessionScore(len(observations), covered, len(new_memories), supported, from_other)
