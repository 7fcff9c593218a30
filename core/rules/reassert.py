"""Dedupe with places: a fact said again where its stored twin is not usable (issue 35).

A write's dedupe (:meth:`core.rules.dedupe.Deduper.decide`) compares it with every stored
memory of its owner, wherever learned. When the twin it finds is not usable where the write
was said (:func:`core.rules.places.usable`: "I prefer tabs over spaces" learned in the DM,
said again in a public channel), answering "duplicate" would leave the bot not knowing
there what the user said right there. :func:`decide` is the rule, once for both backends:

- a twin usable where it was said again: duplicate, as before;
- else another memory usable there that it duplicates: duplicate of that one;
- else a twin learned in the owner's DM that says the same (nothing but form differs,
  ``same`` in :func:`core.rules.dedupe.judge`; not a more specific twin: "The user has a
  younger brother." is not widened by "The user has a brother.") about the same person:
  duplicate, and the twin takes the place it was said in
  (:func:`core.rules.places.widened_place`: it stays usable in the DM);
- else the write is stored for its own place, superseding only the memories usable there
  that it narrows; the twin keeps its place. Said word for word too: the stores keep one
  active copy of a sentence per reach (their unique index on ``(uid, norm, reach)``), so a
  fact learned in a private channel or a group DM and said again in a public channel is
  known in both, each copy used only where its own place allows (listings shown where
  every memory may be used show the newest copy alone, and forgetting one forgets every
  copy: :meth:`core.store.memories.MemoryRules.forget`).

Nothing else changes place: only the owner's own memory (dedupe reads one owner's),
only the one the owner said again, only to the place they said it in.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from core.rules.about import same_person
from core.rules.dedupe import Deduper
from core.rules.places import usable, widened_place
from core.rules.text import normalize
from core.types import Place


class Known(Protocol):
    """A stored memory as this rule sees it."""

    @property
    def id(self) -> int: ...

    @property
    def text(self) -> str: ...

    @property
    def about(self) -> str | None: ...

    @property
    def place(self) -> Place | None: ...


K = TypeVar("K", bound=Known)


@dataclass(frozen=True, slots=True)
class PlacedDecision(Generic[K]):
    """What a write does: ``duplicate_of`` the stored memory it adds nothing to (then it is
    not written), else it is written and ``supersedes`` these; ``widen``: the place
    ``duplicate_of`` takes (None: it keeps its own)."""

    duplicate_of: K | None
    supersedes: tuple[K, ...] = ()
    widen: Place | None = None


def decide(
    dedupe: Deduper,
    *,
    text: str,
    about: str | None,
    place: Place | None,
    known: Sequence[K],
    replacing: Collection[int] = (),
) -> PlacedDecision[K]:
    """What writing ``text`` (about ``about``, said in ``place``: None, the owner's DM) does
    to the owner's stored memories ``known`` (the module's rule). ``replacing``: ids the
    write supersedes anyway (:meth:`core.rules.dedupe.Deduper.decide`)."""
    decision = dedupe.decide(text, known, replacing=replacing)
    twin = decision.duplicate_of
    if twin is None or usable(twin.place, place):
        return PlacedDecision(twin, decision.supersedes)
    here = [k for k in known if usable(k.place, place)]
    local = dedupe.decide(text, here, replacing=replacing)
    if local.duplicate_of is not None:
        return PlacedDecision(local.duplicate_of)
    wider = widened_place(twin.place, place)
    if (
        wider is not None
        and same_person(twin.about, about)
        and dedupe.judge(text, twin.text).reason == "same"
    ):
        return PlacedDecision(twin, widen=wider)
    return PlacedDecision(None, local.supersedes)


def one_copy_each(memories: Sequence[K]) -> list[K]:
    """``memories`` (in their order) without the older copies of a sentence its owner said in
    several places (one active copy per reach, the module's rule): what a tidy of the whole
    (cleanup, consolidation) and the audit judge, so two copies are never taken for
    duplicates of each other (superseding one would take the fact away from its place)."""
    newest: dict[str, int] = {}
    for m in memories:
        key = normalize(m.text)
        newest[key] = max(newest.get(key, m.id), m.id)
    return [m for m in memories if newest[normalize(m.text)] == m.id]
