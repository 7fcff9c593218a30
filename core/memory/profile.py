"""The standing profile: the memories that go into every prompt, whatever the message says.

Recall finds memories that share words (or, with embeddings, meaning) with the message, so a
standing preference ("The user prefers concise answers in bullet points.") would apply only to
messages that happen to mention it. The profile fixes that: each turn's prompt carries the
user's standing memories as a system block of their own, before the volatile block.

**Only the user's facts, only while true** (:func:`in_profile`): a memory about another
person (``about`` set, :mod:`core.rules.about`: "The user's manager prefers short emails.")
never stands in the profile, where it would read as the user's own; nor does a memory whose
last day (``valid_until``) has passed (a trip, a temporary role). Recall finds both when a
message is about them, a past one shown as past (:func:`shown_text`). Of two memories
that contradict each other (:mod:`core.rules.contradict`: "lives in Paris" / "lives in
Berlin"), only the newer is carried, in the profile and in recall.

**The rule** (:func:`select_profile`): a user whose whole store (of such memories) fits
``budget_tokens`` gets all of it. Otherwise candidates are the user's active memories of
every kind but a plain ``fact`` of category ``general`` (the store's ``standing`` filter, a
partial index), newest :data:`PROFILE_CANDIDATES` first. Never superseded or retired ones,
and in a shared channel only memories learned in shared places (as recall). They are taken
by rank, within a rank by how often they were confirmed, then newest first, while they fit
``budget_tokens`` (:func:`estimate_tokens` of their lines):

1. ``context``: who the user is (name, role, team, where they live and work, time zone,
   languages, constraints such as allergies);
2. ``preference`` of category ``communication``: how they want answers;
3. every other ``preference`` (code style, tools, workflow);
4. ``correction``: what they corrected (the old memory is superseded already);
5. ``fact`` of category ``code``, ``tools``, ``workflow`` or ``communication``: their stack
   and ways of working;
6. plain general facts, only when the whole store fits.

Within a rank (:func:`select_profile`): more **confirmations** first (writes dedupe found
to be a memory already stored: ``/remember`` answered "already knew", a reflection's
duplicate candidate; what the user says again matters more), then newer: a new preference
enters a full rank, the oldest unconfirmed one leaves it. How often a memory was recalled is
not used: the profile's own memories are in every prompt, so a recall count would keep
whatever was chosen first ahead of every later memory, and it changes each turn, which would
change the block's bytes between writes. Confirmations change only with a write, so the
choice changes only when the user's memories are written, and the chosen memories are
written in rank, then id order: the block's bytes change only then, and Anthropic's prompt
cache reads it on every other turn. (Recalls are recorded for the audit's ``not_recalled``
rule.) A user whose standing memories all fit the budget gets all of them (no counts are
read).

**Never two near-identical memories in one prompt** (issue 37, :func:`without_twins`): of
two memories the dedupe rule finds near-identical (one adds nothing to the other,
:func:`core.rules.dedupe_index.redundant`), the newer stands for both (a general fact is
left out for its specific twin, whatever their ages). Twins leave the chosen profile and
the budget they held is filled again from the candidates (so the profile's bytes still
depend on the store alone; judging the chosen lines, not all 200 candidates, keeps the cost
to the profile's size), then recall's results are judged against the profile and each
other: a recalled memory near-identical to a profile
line is left out (the profile's line stands, whichever is newer, so the profile block never
changes with the message), of two recalled twins the newer stays. The same rule the writer
uses, so it only matters for memories stored before it (or merged by nothing since).

**Memory questions** ("what do you remember about me?", :mod:`core.rules.memory_questions`)
get the profile and then the user's most recent other memories, newest first, up to the same
budget again, in place of recall (such a message shares no words with what it asks about).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

from core.memory.recall import Recaller
from core.rules.about import person_key
from core.rules.contradict import contradicted, newest_first
from core.rules.dedupe import Deduper
from core.rules.dedupe_index import redundant
from core.rules.memory_questions import is_memory_question
from core.rules.text import as_data
from core.rules.when import as_past, told_as_past
from core.types import Memory, MemoryMode, MemoryUse, ScoredMemory, utcnow

PROFILE_CANDIDATES = 200
"""The newest standing memories read per turn (one indexed query); the budget keeps far
fewer. A ``context`` memory older than the 200 newest standing ones is left to recall."""

RECENT_CANDIDATES = 100
"""The newest memories a memory question reads to fill its budget."""

WHOLE_STORE_MAX = PROFILE_CANDIDATES
"""A user with at most this many memories has them all read in one query: when they all
fit the budget, the profile is the whole store (nothing is left for recall to miss)."""

_RANKS = {"context": 0, "correction": 3}

_TWIN_ROUNDS = 3
"""How often the profile is chosen again after twins leave it (their budget refilled);
after that the twins still in it just leave."""


def is_standing(memory: Memory) -> bool:
    """True for every kind but a plain ``fact`` of category ``general`` (the store's
    ``standing`` filter, :data:`core.store.rows.STANDING`)."""
    return memory.kind != "fact" or memory.category != "general"


def profile_rank(memory: Memory) -> int:
    """0 (first) .. 5: the memory's rank in the profile (the module's rule; 5, plain general
    facts, only when the whole store fits)."""
    if memory.kind == "preference":
        return 1 if memory.category == "communication" else 2
    if memory.kind == "fact":
        return 4 if memory.category != "general" else 5
    return _RANKS.get(memory.kind, 4)


def profile_cost(memories: Sequence[Memory]) -> int:
    """Tokens the profile lines of ``memories`` cost (:func:`estimate_tokens`)."""
    return sum(estimate_tokens(memory_line(m, dated=False)) + 1 for m in memories)


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` costs, estimated offline: a token per 4 ASCII characters (English
    text averages about 4 characters a token; Anthropic's tokenizer is not public) and one
    per other character (CJK text is close to a token a character). Over-counts rather than
    under-counts, so a budget holds."""
    ascii_chars = sum(1 for ch in text if ch < "\x80")
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def in_profile(memory: Memory, today: date) -> bool:
    """Whether ``memory`` may stand in the profile as the user's: about the user (not
    another person: their facts are recall's, :mod:`core.rules.about`) and not past (its
    last day, ``valid_until``, is not before ``today``; recall still finds it)."""
    return memory.about_user and not memory.past(today)


def shown_text(memory: Memory, today: date | None) -> str:
    """``memory``'s text as the prompt and every listing show it: a past memory (its last
    day before ``today``) told as past (:func:`core.rules.when.as_past`: "The user was
    travelling to Singapore in the week of 2026-12-07 to 2026-12-13."), or with "Until
    2026-12-13: " before it when no verb can say so; any other memory as stored."""
    if today is None or not memory.past(today) or told_as_past(memory.text):
        return memory.text  # one that consolidation told as past already stays as stored
    told = as_past(memory.text)
    return told if told != memory.text else f"Until {memory.valid_until}: {memory.text}"


def memory_line(memory: Memory, *, dated: bool, today: date | None = None) -> str:
    """One memory in a prompt block: ``#12 2026-11-30 "The user ..."`` (the date only when
    ``dated``); a memory past on ``today`` reads ``#12 2026-11-30 (past) "The user was
    ..."`` (:func:`shown_text`). The text is a JSON string
    (:func:`core.rules.text.as_data`): a memory can neither end its line nor close a
    block."""
    day = f" {memory.created_at.date().isoformat()}" if dated else ""
    past = " (past)" if today is not None and memory.past(today) else ""
    return f"#{memory.id}{day}{past} {as_data(shown_text(memory, today))}"


def select_profile(
    candidates: Sequence[Memory],
    *,
    budget_tokens: int,
    uses: Mapping[int, MemoryUse] | None = None,
) -> list[Memory]:
    """The profile out of ``candidates`` (standing memories, any order): by rank, within a
    rank by ``uses`` (confirmations; a memory absent has none), then newest first, while
    their lines fit ``budget_tokens``; returned in rank, then id order (stable bytes). A
    memory too long for what is left is skipped, not the rest."""
    used = uses or {}
    none = MemoryUse()

    def order(m: Memory) -> tuple[int, int, int]:
        return (profile_rank(m), -used.get(m.id, none).confirmations, -m.id)

    chosen: list[Memory] = []
    left = budget_tokens
    for memory in sorted(candidates, key=order):
        cost = estimate_tokens(memory_line(memory, dated=False)) + 1
        if cost <= left:
            chosen.append(memory)
            left -= cost
    return sorted(chosen, key=lambda m: (profile_rank(m), m.id))


def without_twins(memories: Sequence[Memory], deduper: Deduper) -> list[Memory]:
    """``memories`` (any order, returned in it) less the ones another of them stands for
    (:func:`core.rules.dedupe_index.redundant`, ages by ``created_at`` then id)."""
    by_age = sorted(memories, key=lambda m: (m.created_at, m.id))
    gone = _twins(by_age, deduper)
    return [m for m in memories if m.id not in gone]


def _twins(by_age: Sequence[Memory], deduper: Deduper) -> set[int]:
    """The ids of ``by_age`` (oldest first) that a newer one stands for, judged only among
    memories about the same person (:func:`core.rules.about.same_person`, as the writer
    does): the user's own preference is no twin of their manager's."""
    people: dict[str, list[Memory]] = {}
    for memory in by_age:
        people.setdefault(person_key(memory.about), []).append(memory)
    return {
        group[i].id
        for group in people.values()
        for i in redundant([m.text for m in group], deduper)
    }


def _recalled_without_twins(
    found: Sequence[ScoredMemory], profile: Sequence[Memory], deduper: Deduper
) -> list[ScoredMemory]:
    """Recall's results less those near-identical to a profile line, and of recalled twins
    all but the newest (at its own rank)."""
    if not found:
        return []
    everything = [*profile, *(s.memory for s in found)]
    by_age = sorted(everything, key=lambda m: (m.created_at, m.id))
    in_profile = {m.id for m in profile}
    # Profile lines are "newest" for this purpose: they always stand.
    by_age = [m for m in by_age if m.id not in in_profile] + [
        m for m in by_age if m.id in in_profile
    ]
    gone = _twins(by_age, deduper)
    return [s for s in found if s.memory.id not in gone]


def fill_budget(memories: Sequence[Memory], *, budget_tokens: int) -> list[Memory]:
    """The first of ``memories`` whose dated lines fit ``budget_tokens``, in their order."""
    kept: list[Memory] = []
    left = budget_tokens
    for memory in memories:
        cost = estimate_tokens(memory_line(memory, dated=True)) + 1
        if cost > left:
            break
        kept.append(memory)
        left -= cost
    return kept


@dataclass(frozen=True)
class MemoryContext:
    """What one turn's prompt carries of the user's memory.

    ``profile``: the standing profile (every turn); ``recalled``: recall for this message,
    none of them in the profile, best first (for a memory question: the most recent other
    memories, newest first, score 0); ``stored``: how many active memories the user has (in
    the owner's own place, a sentence learned in several places once, as listed);
    ``question``: the message asks what the bot remembers; ``mode``: the user's memory mode
    (``off``: nothing is used); ``shared``: a shared place (only shared memories used).
    """

    profile: list[Memory] = field(default_factory=list)
    recalled: list[ScoredMemory] = field(default_factory=list)
    stored: int = 0
    question: bool = False
    mode: MemoryMode = "on"
    shared: bool = False

    @property
    def ids(self) -> list[int]:
        """The ids of the memories the prompt carries: the profile's, then recall's."""
        return [m.id for m in self.profile] + [s.memory.id for s in self.recalled]


class ProfileStore(Protocol):
    """What the profile reads of the store (:class:`core.store.seams.MemoryStore`)."""

    async def list_memories(
        self,
        *,
        user_key: str,
        limit: int = 20,
        offset: int = 0,
        include_superseded: bool = False,
        reach: Sequence[str] | None = None,
        standing: bool = False,
        one_copy: bool = False,
    ) -> list[Memory]: ...

    async def count(self, *, user_key: str, one_copy: bool = False) -> int: ...

    async def memory_uses(
        self, *, user_key: str, memory_ids: Sequence[int] | None = None
    ) -> dict[int, MemoryUse]: ...


async def build_context(
    *,
    store: ProfileStore,
    recaller: Recaller,
    user_key: str,
    message: str,
    query: str | None = None,
    k: int,
    reach: Sequence[str] | None,
    budget_tokens: int,
    mode: MemoryMode = "on",
    today: date | None = None,
    deduper: Deduper | None = None,
) -> MemoryContext:
    """The profile and recall for one message of ``user_key``, never two near-identical
    memories (:func:`without_twins`, by ``deduper``'s rule; default the product's).

    ``message`` decides whether this is a memory question; ``query`` (default ``message``)
    is what recall searches; ``k`` is recall's ``top_k``, filled with memories the profile
    does not already hold; ``reach`` as for recall (the place rule's tokens, None in the
    owner's DM: :func:`core.rules.places.usable_reaches`). A user whose memory is ``off``
    gets an empty context. Only memories :func:`in_profile` on ``today`` (default: UTC's
    today) enter the profile: another person's facts and past ones are left to recall.
    Errors are the store's.
    """
    today = today or utcnow().date()
    shared = reach is not None
    if mode == "off":
        return MemoryContext(mode=mode, shared=shared)
    # The owner's own place counts (and reads) a sentence learned in several places once,
    # as /memories lists it (the count line says the number there); a shared place reads the
    # copies usable there and never says the count.
    stored = await store.count(user_key=user_key, one_copy=not shared)
    if stored == 0:
        return MemoryContext(mode=mode, shared=shared)
    question = is_memory_question(message)
    fits = False
    if stored <= WHOLE_STORE_MAX:
        everything = await store.list_memories(
            user_key=user_key, limit=stored, reach=reach, one_copy=not shared
        )
        everything = newest_first([m for m in everything if in_profile(m, today)])
        fits = profile_cost(everything) <= budget_tokens
        candidates = everything if fits else [m for m in everything if is_standing(m)]
    else:
        candidates = await store.list_memories(
            user_key=user_key, limit=PROFILE_CANDIDATES, reach=reach, standing=True
        )
        candidates = newest_first([m for m in candidates if in_profile(m, today)])
    rule = deduper or Deduper()
    uses: dict[int, MemoryUse] = {}
    if not fits and profile_cost(candidates) > budget_tokens:  # a choice: read the counts
        uses = await store.memory_uses(user_key=user_key, memory_ids=[m.id for m in candidates])
    profile = select_profile(candidates, budget_tokens=budget_tokens, uses=uses)
    for _ in range(_TWIN_ROUNDS):  # twins out, the budget they held filled again
        kept = without_twins(profile, rule)
        if len(kept) == len(profile):
            break
        gone = {m.id for m in profile} - {m.id for m in kept}
        candidates = [m for m in candidates if m.id not in gone]
        profile = select_profile(candidates, budget_tokens=budget_tokens, uses=uses)
    else:
        profile = without_twins(profile, rule)
    held = {m.id for m in profile}
    if question:
        recent = await store.list_memories(user_key=user_key, limit=RECENT_CANDIDATES, reach=reach)
        others = [m for m in recent if m.id not in held]
        others = [
            s.memory
            for s in _recalled_without_twins(
                [ScoredMemory(memory=m, score=0.0) for m in others], profile, rule
            )
        ]
        recalled = [
            ScoredMemory(memory=m, score=0.0)
            for m in fill_budget(others, budget_tokens=budget_tokens)
        ]
    else:
        found = await recaller.recall(
            user_key=user_key,
            query=message if query is None else query,
            k=k + len(held),
            reach=reach,
        )
        recalled = _recalled_without_twins(
            [s for s in found if s.memory.id not in held], profile, rule
        )[:k]
    lost = contradicted([*profile, *(s.memory for s in recalled)])
    if lost:  # two that contradict each other: the newer one stands
        profile = [m for m in profile if m.id not in lost]
        recalled = [s for s in recalled if s.memory.id not in lost]
    return MemoryContext(
        profile=profile,
        recalled=recalled,
        stored=stored,
        question=question,
        mode=mode,
        shared=shared,
    )


def listed_text(memory: Memory, today: date | None = None) -> str:
    """``memory``'s text in a listing (``/memories``, the Home tab, the CLI, the terminal):
    :func:`shown_text` on ``today`` (default: UTC's today), with ``(past)`` before a past
    memory."""
    today = today or utcnow().date()
    text = shown_text(memory, today)
    return f"(past) {text}" if memory.past(today) else text
