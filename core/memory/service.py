"""Memory operations every adapter uses: remember, forget, list, search, stats, history,
export and import. One object, :class:`MemoryService`, over a :class:`core.store.seams.MemoryStore`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from core.errors import (
    ImportFormatError,
    MemoryInputError,
    MemoryNotFound,
    PlanNotPending,
    SecretInMemory,
    StaleButton,
)
from core.memory.recall import BM25Recaller, Recaller
from core.memory.refs import STALE_BUTTON, parse_memory_ref
from core.metrics import Metrics
from core.platforms import LOCAL
from core.rules.about import person_key, whose
from core.rules.classify import classify, third_person
from core.rules.dedupe import DEFAULT_THRESHOLD, Deduper
from core.rules.dedupe_index import DedupeIndex, Known
from core.rules.places import parse_place, place_key, reach_of
from core.rules.reassert import one_copy_each
from core.rules.secrets import KINDS as KIND_NAMES
from core.rules.secrets import SecretFinding, durable_part, find_secrets, refusal
from core.rules.text import clean_text, needs_cleaning
from core.rules.when import dated
from core.store.channels import ChannelStore
from core.store.seams import CleanupStore, MemoryStore, PlanStore
from core.types import (
    CATEGORIES,
    KINDS,
    MAX_MEMORY_CHARS,
    ORIGINS,
    SOURCES,
    AddResult,
    Category,
    Kind,
    Memory,
    MemoryEvent,
    MemoryMode,
    MemoryStats,
    NewMemory,
    Origin,
    Place,
    ScoredMemory,
    Source,
    utcnow,
)

if TYPE_CHECKING:
    from core.memory.tidy_notes import TidyNote

logger = logging.getLogger(__name__)

MAX_IMPORT_LINES = 100_000
"""An import file holds at most this many memories."""

IMPORT_BATCH = 200
"""Memories written per transaction by an import (a few tens of ms of write lock each, so a
bot sharing the database waits at most that long; ``bench/import_lines.py``)."""
IMPORT_PAUSE_S = 0.005
"""Seconds an import waits between its transactions. SQLite keeps no queue for its write lock
across processes: a process waiting for it sleeps in its busy handler and retries, and an
importer that begins its next transaction at once can win every time. Measured with
``python bench/import_lines.py --lines 50000`` (a bot process writing every 10 ms meanwhile):
its worst command took 2,041 ms with no pause, 84 and 232 ms in two runs with 5 ms (1,544 and
1,582 against 1,584 lines/s) and 37 ms with 20 ms (1,309 lines/s)."""


def in_third_person(text: str) -> str:
    """``text`` rewritten in the third person (:func:`core.rules.classify.third_person`) when
    that is safe and still fits the memory rule's length, else ``text``."""
    rewritten = third_person(text)
    return rewritten if len(rewritten) < MAX_MEMORY_CHARS else text


HYPOTHETICAL = (
    'That reads as a supposition ("if ...", "suppose ...", "what if ..."), not a fact,'
    " so nothing was stored. Say it as a fact to have it remembered."
)
"""What ``/remember`` answers for a hypothetical (:func:`core.rules.about.whose`)."""


@dataclass(frozen=True, slots=True)
class Worded:
    """A memory as the offline rule writes it (:func:`offline_memory`): its text, whose
    fact it is (None: the user's), the days it holds, and the labels the rule gives it."""

    text: str
    about: str | None
    valid_from: date | None
    valid_until: date | None
    kind: Kind
    category: Category


def offline_memory(cleaned: str, *, today: date | None) -> Worded:
    """``cleaned`` (:func:`clean_memory_text`'s output) as the offline rule stores it: in
    the third person, or another person's fact written as theirs
    (:func:`core.rules.about.whose`; labelled a plain ``fact``/``general``, so it never
    enters the standing profile); with ``today`` (the day it was said), its relative dates
    made absolute and the days it holds (:func:`core.rules.when.dated`); kind and category
    by :func:`core.rules.classify.classify` (of the text before its dates were written out,
    so "next week" is still a one-off). A rewording that would break the length rule is
    not made. Raises ``MemoryInputError`` (:data:`HYPOTHETICAL`) for a supposition."""
    found = whose(cleaned)
    if not found.fact:
        raise MemoryInputError(HYPOTHETICAL)
    text = found.text if len(found.text) < MAX_MEMORY_CHARS else cleaned
    kind, category = classify(text)
    if found.about is not None:
        kind, category = "fact", "general"
    valid_from = valid_until = None
    if today is not None:
        when = dated(text, today)
        if len(when.text) < MAX_MEMORY_CHARS:
            text, valid_from, valid_until = when.text, when.valid_from, when.valid_until
    return Worded(text, found.about, valid_from, valid_until, kind, category)


def remembered_text(text: str, *, today: date | None = None) -> str:
    """What ``/remember TEXT`` stores when said on ``today``: ``text`` cleaned
    (:func:`clean_memory_text`, which raises as it does) and worded by
    :func:`offline_memory`. The one rule, so whoever holds the typed words (the terminal's
    input history) can tell the memory they became."""
    return offline_memory(clean_memory_text(text), today=today).text


def clean_memory_text(text: str) -> str:
    """Clean (:func:`core.rules.text.clean_text`, one line), collapse whitespace; raise
    ``MemoryInputError`` if empty or too long, ``SecretInMemory`` if it carries a secret
    (:func:`core.rules.secrets.find_secrets`) and no part that stands without it (else that
    part is returned: :func:`screened_memory_text`). A memory is one sentence under
    ``MAX_MEMORY_CHARS`` (200) characters.

    The one gate of every memory text: ``/remember`` on each platform and the terminal, the
    CLI's ``memories remember``, each import line, each reflection candidate and cleanup
    merge (:func:`core.memory.reflection.screen_text`).
    """
    return screened_memory_text(text)[0]


def screened_memory_text(text: str) -> tuple[str, SecretFinding | None]:
    """:func:`clean_memory_text`, and the first secret it left out: a text with a secret
    keeps the part that stands without it (:func:`core.rules.secrets.durable_part`: "The
    user uses Postgres 16 with password admin123" -> "The user uses Postgres 16."), and is
    refused whole (``SecretInMemory``) when it has none."""
    cleaned = clean_text(text, keep_newlines=False)
    if not cleaned:
        raise MemoryInputError("a memory needs some text")
    if len(cleaned) >= MAX_MEMORY_CHARS:
        raise MemoryInputError(
            f"a memory must be under {MAX_MEMORY_CHARS} characters (this one has {len(cleaned)})"
        )
    findings = find_secrets(cleaned)
    if not findings:
        return cleaned, None
    kept = durable_part(cleaned, findings)
    if kept is None:
        raise SecretInMemory(refusal(findings), kind=findings[0].kind)
    return kept, findings[0]


MAX_MEMORY_ID = 2**63 - 1
"""Ids are SQLite/PostgreSQL 64-bit integers."""


def parse_memory_id(text: str) -> int:
    """A memory id typed by a user (``12`` or ``#12``; ASCII digits only).

    Raises ``MemoryNotFound`` for anything that cannot be one of the user's ids.
    """
    digits = text.strip().removeprefix("#")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        raise MemoryNotFound(-1)
    value = int(digits)
    if not 0 < value <= MAX_MEMORY_ID:
        raise MemoryNotFound(value)
    return value


def parse_user_key(value: str) -> str:
    """A full user key (``slack:T1:U1``) or a bare name, which means ``cli:NAME`` (the
    terminal's, :data:`core.platforms.LOCAL`).

    Raises ``MemoryInputError`` for an empty key, one with blank parts, or one holding
    control or invisible formatting characters (:func:`core.rules.text.needs_cleaning`).
    """
    value = value.strip()
    if not value:
        raise MemoryInputError("a user is required")
    key = value if ":" in value else f"{LOCAL}:{value}"
    if any(not part.strip() for part in key.split(":")) or needs_cleaning(key):
        raise MemoryInputError(f"malformed user key {value!r}")
    return key


@dataclass(frozen=True, slots=True)
class ImportResult:
    """Counts of an import."""

    added: int
    duplicates: int
    superseded: int = 0  # stored memories (or earlier lines) a more specific line replaced


def memory_to_export(memory: Memory) -> dict[str, Any]:
    """One export line (no id, no user key, so it imports anywhere)."""
    return {
        "text": memory.text,
        "kind": memory.kind,
        "category": memory.category,
        "origin": memory.origin,
        "place": None if memory.place is None else place_key(memory.place),
        "source": memory.source,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        **({"about": memory.about} if memory.about is not None else {}),
        **({"valid_from": memory.valid_from.isoformat()} if memory.valid_from else {}),
        **({"valid_until": memory.valid_until.isoformat()} if memory.valid_until else {}),
    }


def _choice(obj: dict[str, Any], key: str, allowed: Sequence[str], default: str, line: int) -> str:
    value = obj.get(key, default)
    if value not in allowed:
        raise ImportFormatError(line, f"{key} must be one of {', '.join(allowed)}")
    return cast(str, value)


def _time(obj: dict[str, Any], key: str, line: int) -> datetime | None:
    value = obj.get(key)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        raise ImportFormatError(line, f"{key} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise ImportFormatError(line, f"{key} needs a timezone")
    return parsed


def _day(obj: dict[str, Any], key: str, line: int) -> date | None:
    value = obj.get(key)
    if value is None:
        return None
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise ImportFormatError(line, f"{key} is not an ISO 8601 day (YYYY-MM-DD)") from None


def _about(obj: dict[str, Any], found: str | None, line: int) -> str | None:
    if "about" not in obj:
        return found
    value = obj["about"]
    if value is None or (isinstance(value, str) and value.strip().casefold() in ("", "user")):
        return None
    if not isinstance(value, str) or len(value) > 100 or needs_cleaning(value):
        raise ImportFormatError(line, "about must be a short name, or null for the user")
    return value.strip()


def parse_import_line(raw: str, line: int) -> NewMemory | None:
    """One JSON Lines record as a :class:`NewMemory` (``source`` kept); None for a blank line.

    Raises ``ImportFormatError`` naming ``line``.
    """
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(line, f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise ImportFormatError(line, 'expected an object with a "text" string')
    try:
        text = clean_memory_text(obj["text"])
    except SecretInMemory as exc:
        reason = f"it holds {KIND_NAMES[exc.kind]}; secrets are never stored as memories"
        raise ImportFormatError(line, reason, secret=True) from None
    except MemoryInputError as exc:
        raise ImportFormatError(line, str(exc)) from None
    found = whose(text)
    text = found.text if found.fact and len(found.text) < MAX_MEMORY_CHARS else text
    kind, category = classify(text)
    about = _about(obj, found.about if found.fact else None, line)
    if about is not None:
        kind, category = "fact", "general"
    valid_from, valid_until = _day(obj, "valid_from", line), _day(obj, "valid_until", line)
    if valid_from and valid_until and valid_until < valid_from:
        raise ImportFormatError(line, "valid_until is before valid_from")
    return NewMemory(
        text=text,
        kind=cast(Kind, _choice(obj, "kind", KINDS, kind, line)),
        category=cast(Category, _choice(obj, "category", CATEGORIES, category, line)),
        origin=cast(Origin, _choice(obj, "origin", ORIGINS, "private", line)),
        source=cast(Source, _choice(obj, "source", SOURCES, "import", line)),
        created_at=_time(obj, "created_at", line),
        updated_at=_time(obj, "updated_at", line),
        about=about,
        valid_from=valid_from,
        valid_until=valid_until,
        # Where it was learned, as exported (anything else: the owner's DM, the narrowest).
        place=parse_place(place) if isinstance(place := obj.get("place"), str) else None,
    )


FORGET_ALL_KIND = "forget_all"
"""The ``kind`` of a chat *Forget everything* confirmation (``/forget all``) in the store."""
CONFIRM_TTL_S = 15 * 60.0
"""A *Forget everything* confirmation can be pressed for this long (longer than Slack's
5-minute replay window for a signed request, shorter than its 30-minute ``response_url``)."""
HOME_FORGET_ALL_KIND = "forget_all_home"
"""The ``kind`` of the token behind a memory page's *Forget everything* button (Slack's Home
tab): one per user, replaced each time the page is published, apart from the chat's."""
HOME_CONFIRM_TTL_S = 24 * 3600.0
"""A memory page's *Forget everything* button works this long after the page was published
(a Home tab stays open for hours; a click after that gets a fresh page and presses again)."""
ForgetAllSurface = Literal["chat", "home"]
"""Where a *Forget everything* button is: a chat confirmation or a memory page."""
_FORGET_ALL = {
    "chat": (FORGET_ALL_KIND, CONFIRM_TTL_S),
    "home": (HOME_FORGET_ALL_KIND, HOME_CONFIRM_TTL_S),
}
CONFIRM_GONE = (
    "This confirmation was already used or has expired; nothing was forgotten. "
    "Run `/forget all` again."
)


_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,64}")


def new_token() -> str:
    """A random single-use token for a button: 16 URL-safe characters (96 bits), never
    starting with ``-`` (printed in a command such as ``selfmind channels undo KEY TOKEN``,
    it would be read as an option)."""
    while True:
        token = secrets.token_urlsafe(12)
        if not token.startswith("-"):
            return token


def is_token(value: str) -> bool:
    """Whether ``value`` has the shape of :func:`new_token` (a forged button value with NUL,
    control characters or 5,000 characters never reaches the store)."""
    return _TOKEN.fullmatch(value) is not None


class ModeStore(Protocol):
    """The per-user memory mode (``on`` / ``paused`` / ``off``)."""

    async def get_mode(self, *, user_key: str) -> MemoryMode:
        """The user's mode; ``on`` when never set."""
        ...

    async def set_mode(self, *, user_key: str, mode: MemoryMode) -> None:
        """Set the user's mode."""
        ...


class ServiceStore(MemoryStore, ModeStore, PlanStore, ChannelStore, Protocol):
    """What :class:`MemoryService` needs of a store."""


class MemoryService:
    """The memory operations, always on behalf of one ``user_key``.

    Destructive confirmations are single-use: :meth:`confirm_forget_all` stores a random
    token (:class:`core.store.seams.PlanStore`, shared by every replica) that exactly one
    :meth:`forget_all_confirmed` consumes, so a replayed or double click forgets nothing.
    """

    def __init__(
        self,
        store: ServiceStore,
        *,
        dedupe_threshold: float = DEFAULT_THRESHOLD,
        metrics: Metrics | None = None,
        recaller: Recaller | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.recaller: Recaller = recaller or BM25Recaller(store)
        self.deduper = Deduper(dedupe_threshold)
        self.metrics = metrics or Metrics()
        self.clock = clock

    async def get_mode(self, *, user_key: str) -> MemoryMode:
        """The user's memory mode (``on`` when never set)."""
        return await self.store.get_mode(user_key=user_key)

    async def set_mode(self, *, user_key: str, mode: MemoryMode) -> None:
        """Set the user's memory mode: ``paused`` recalls but learns nothing, ``off`` neither."""
        await self.store.set_mode(user_key=user_key, mode=mode)
        logger.info("memory mode user=%s mode=%s", user_key, mode)

    async def confirm_forget_all(self, *, user_key: str, surface: ForgetAllSurface = "chat") -> str:
        """A single-use token for the user's *Forget everything* button on ``surface``: a chat
        confirmation (valid :data:`CONFIRM_TTL_S`) or a memory page (valid
        :data:`HOME_CONFIRM_TTL_S`). A new one replaces the user's earlier ones on the same
        surface only, so a chat confirmation and the memory page never cancel each other."""
        kind, ttl_s = _FORGET_ALL[surface]
        token = new_token()
        await self.store.put_pending(
            token=token,
            user_key=user_key,
            kind=kind,
            payload="",
            expires_at=self.clock() + timedelta(seconds=ttl_s),
            replace=True,
        )
        return token

    async def forget_all_confirmed(
        self, *, user_key: str, token: str, surface: ForgetAllSurface = "chat"
    ) -> int:
        """Consume the user's confirmation ``token`` of ``surface`` and forget everything
        (:meth:`forget_all`). ``PlanNotPending`` (:data:`CONFIRM_GONE`; nothing forgotten)
        when the token was used, expired, replaced, or is not this user's."""
        kind, _ = _FORGET_ALL[surface]
        taken = None
        if is_token(token):
            taken = await self.store.take_pending(
                token=token, user_key=user_key, kind=kind, now=self.clock()
            )
        if taken is None:
            logger.info("forget_all refused: user=%s surface=%s gone", user_key, surface)
            raise PlanNotPending(CONFIRM_GONE, reason="gone")
        return await self.forget_all(user_key=user_key)

    async def remember(
        self,
        *,
        user_key: str,
        text: str,
        kind: Kind | None = None,
        category: Category | None = None,
        source: Source = "remember",
        origin: Origin = "private",
        conversation_key: str | None = None,
        place: Place | None = None,
    ) -> AddResult:
        """Store ``text`` unless an equivalent memory exists; ``result.text`` is what was
        stored (or, for a duplicate, what was given). ``place``: where it was said (None:
        the owner's DM; :mod:`core.rules.places`).

        The text is written by the offline rule (:func:`offline_memory`): in the third
        person where that is safe ("I prefer tabs" -> "The user prefers tabs."), another
        person's fact as theirs ("my manager prefers short emails" -> "The user's manager
        prefers short emails.", about "the user's manager"), relative dates made absolute
        against :attr:`clock`'s day with the days the memory holds; ``kind``/``category``
        left None are given by the rule. Raises ``MemoryInputError`` for empty or over-long
        text and for a supposition (:data:`HYPOTHETICAL`), ``SecretInMemory`` (nothing
        stored) for a text carrying a secret.
        """
        try:
            screened, left_out = screened_memory_text(text)
        except SecretInMemory as exc:
            logger.info("remember refused: user=%s secret=%s", user_key, exc.kind)
            self.metrics.secrets_refused(source)
            raise
        if left_out is not None:
            logger.info("remember left a secret out: user=%s secret=%s", user_key, left_out.kind)
        worded = offline_memory(screened, today=self.clock().date())
        cleaned = worded.text
        memory = NewMemory(
            text=cleaned,
            kind=kind or worded.kind,
            category=category or worded.category,
            source=source,
            origin=origin,
            conversation_key=conversation_key,
            about=worded.about,
            valid_from=worded.valid_from,
            valid_until=worded.valid_until,
            place=place,
        )
        result = await self.store.add(user_key=user_key, memory=memory, dedupe=self.deduper)
        logger.info(
            "remember user=%s id=%s status=%s kind=%s category=%s",
            user_key,
            result.id,
            result.status,
            memory.kind,
            memory.category,
        )
        self.metrics.memories_stored(source, int(result.status == "added"))
        return replace(result, text=cleaned, left_out=left_out.name if left_out else "")

    async def forget(self, *, user_key: str, memory_id: int) -> Memory:
        """Forget one of the user's memories (an id the user typed); returns it as it was.
        Raises ``MemoryNotFound`` if it is not theirs."""
        if not 0 < memory_id <= MAX_MEMORY_ID:
            raise MemoryNotFound(memory_id)
        memory = await self.store.get(user_key=user_key, memory_id=memory_id)
        if memory is None:
            raise MemoryNotFound(memory_id)
        return await self._forget(memory)

    async def forget_ref(self, *, user_key: str, ref: str) -> Memory:
        """Forget the memory a button's ``ref`` names (:func:`core.memory.refs.memory_ref`),
        only if the user's memory with its id is still the one it was made for; returns it.

        Raises ``StaleButton`` (:data:`core.memory.refs.STALE_BUTTON`, nothing forgotten) for
        an old-format or malformed value, or when the id now names another memory;
        ``MemoryNotFound`` when the user has no memory with that id (forgotten already, or
        someone else's)."""
        parsed = parse_memory_ref(ref)
        if parsed is None:
            logger.info("forget refused: user=%s button value is not a memory ref", user_key)
            raise StaleButton(-1, STALE_BUTTON)
        memory = await self.store.get(user_key=user_key, memory_id=parsed.memory_id)
        if memory is None:
            raise MemoryNotFound(parsed.memory_id)
        if not parsed.names(memory):
            logger.info("forget refused: user=%s id=%s names another memory", user_key, memory.id)
            raise StaleButton(memory.id, STALE_BUTTON)
        return await self._forget(memory)

    async def _forget(self, memory: Memory) -> Memory:
        if not await self.store.forget(user_key=memory.user_key, memory_id=memory.id):
            raise MemoryNotFound(memory.id)  # forgotten meanwhile
        logger.info("forget user=%s id=%s", memory.user_key, memory.id)
        self.metrics.memories_forgotten()
        return memory

    async def forget_all(self, *, user_key: str) -> int:
        """Forget all of the user's memories and conversation history, and remove their name
        from the channel memory entries they said (team memory: the entries stay); returns
        the count of their memories forgotten."""
        count = await self.store.forget_all(user_key=user_key)
        await self.store.unattribute(user_key=user_key)
        logger.info("forget_all user=%s count=%s", user_key, count)
        self.metrics.memories_forgotten(count)
        return count

    async def list_memories(
        self,
        *,
        user_key: str,
        limit: int = 20,
        offset: int = 0,
        reach: Sequence[str] | None = None,
    ) -> list[Memory]:
        """Active memories, newest first; ``limit`` in 1..1000; ``reach``: only those usable
        where they are shown (:func:`core.rules.places.usable_reaches`; None: every one). A
        sentence the user said in several places (a copy per place,
        :mod:`core.rules.reassert`) is listed once, as its newest copy; forgetting it
        forgets every copy."""
        return await self.store.list_memories(
            user_key=user_key,
            limit=min(max(limit, 1), 1000),
            offset=max(offset, 0),
            reach=reach,
            one_copy=True,
        )

    async def count(self, *, user_key: str) -> int:
        """Number of active memories, as :meth:`list_memories` lists them (a sentence learned
        in several places once)."""
        return await self.store.count(user_key=user_key, one_copy=True)

    async def search(
        self, *, user_key: str, query: str, k: int = 6, reach: Sequence[str] | None = None
    ) -> list[ScoredMemory]:
        """The user's memories that share words with ``query`` (the store's BM25), best
        first, ``k`` clamped to 1..100; any text is a valid query.

        A search the person types (``/memories search``, the Home tab, ``memories search``,
        Discord's autocomplete) lists word matches only: the chat's recall
        (:attr:`recaller`) also ranks memories by meaning, and so always has a best few
        to offer, which a search must not present as matches ("tea" finding "The user
        lives in Lisbon.") A sentence said in several places (a copy per place) is found
        once, as its newest copy, as :meth:`list_memories` lists it."""
        found = await self.store.search(
            user_key=user_key, query=query, k=min(max(k, 1), 100), reach=reach
        )
        newest = {m.id for m in one_copy_each([s.memory for s in found])}
        return [s for s in found if s.memory.id in newest]

    async def stats(self, *, user_key: str | None = None) -> MemoryStats:
        """Counts by kind and category."""
        return await self.store.stats(user_key=user_key)

    async def history(self, *, user_key: str) -> list[MemoryEvent]:
        """Memory events, oldest first."""
        return await self.store.history(user_key=user_key)

    async def last_tidy(self, *, user_key: str) -> TidyNote | None:
        """The user's consolidation change of last night not undone, if any
        (:func:`core.memory.consolidation.last_tidy`)."""
        from core.memory.tidy_notes import last_tidy

        return await last_tidy(self.store, user_key=user_key, now=self.clock())

    async def undo_tidy(self, *, user_key: str, change_id: str | None = None) -> int | None:
        """Undo the user's consolidation change ``change_id`` (default: last night's); the
        memories put back, or None when there is none to undo. Raises ``StoreError`` for
        an id that is not the user's consolidation change, or one already undone."""
        from core.memory.tidy_notes import undo_tidy

        if change_id is None:
            note = await self.last_tidy(user_key=user_key)
            if note is None:
                return None
            change_id = note.change_id
        store = cast(CleanupStore, self.store)  # every store is one (core.store.seams.Store)
        restored = await undo_tidy(store, user_key=user_key, change_id=change_id)
        logger.info("tidy undone user=%s change=%s restored=%d", user_key, change_id, restored)
        return restored

    async def export(self, *, user_key: str) -> list[dict[str, Any]]:
        """Active memories as export records, oldest first."""
        return [memory_to_export(m) for m in await self.store.export(user_key=user_key)]

    async def import_lines(
        self,
        *,
        user_key: str,
        lines: Iterable[str],
        progress: Callable[[int, int], None] | None = None,
    ) -> ImportResult:
        """Import JSON Lines: the whole file is validated before anything is written.

        Malformed lines raise one ``ImportFormatError`` naming every one of them (its
        ``problems``, each line's number and reason) and nothing is written. Each line is
        deduped (:class:`core.rules.dedupe.Deduper`, every candidate of its Jaccard screen
        found by :class:`core.rules.dedupe_index.DedupeIndex`) against the user's stored
        memories and the lines before it. The new ones go in ``IMPORT_BATCH`` at a
        time, each batch its own short transaction with a pause after it
        (:data:`IMPORT_PAUSE_S`), so a bot sharing the database keeps answering;
        ``progress(done, total)`` is called after each batch (``total`` = the new memories).
        A failure mid-way (disk full) leaves the batches already written: importing the
        same file again adds only the rest (they are duplicates).
        """
        memories = []
        problems: list[ImportFormatError] = []
        for number, raw in enumerate(lines, start=1):
            if number > MAX_IMPORT_LINES:
                problems.append(ImportFormatError(number, f"more than {MAX_IMPORT_LINES} lines"))
                break
            try:
                parsed = parse_import_line(raw, number)
            except ImportFormatError as exc:
                if exc.secret:
                    logger.info("import refused: user=%s line=%s secret", user_key, number)
                    self.metrics.secrets_refused("import")
                problems.append(exc)
                continue
            if parsed is not None:
                memories.append(parsed)
        if problems:
            raise ImportFormatError.of(problems)
        if not memories:
            return ImportResult(added=0, duplicates=0)
        # Dedupe in memory against the stored memories and the lines before (all candidates
        # of the Jaccard screen, core.rules.dedupe_index), then write the new ones in short batches.
        stored = await self.store.export(user_key=user_key)

        # One index per person a memory is about and place it may be used in: only those
        # are compared (same_person; a sentence learned in two places is a copy in each,
        # core.rules.reassert, so an export's copies come back as copies).
        def bucket(memory: Memory | NewMemory) -> tuple[str, str]:
            return person_key(memory.about), reach_of(memory.place)

        texts: dict[tuple[str, str], list[str]] = {}
        for m in stored:
            texts.setdefault(bucket(m), []).append(m.text)
        for new in memories:
            texts.setdefault(bucket(new), []).append(new.text)
        indexes = {key: DedupeIndex(self.deduper, group) for key, group in texts.items()}
        for m in stored:
            indexes[bucket(m)].add(Known(m.id, m.text))
        fresh: list[NewMemory] = []
        narrowing: list[NewMemory] = []  # more specific than a memory known before it
        for memory in memories:
            index = indexes[bucket(memory)]
            decision = index.decide(memory.text)
            if decision.duplicate_of is None:
                index.add(Known(None, memory.text))
                (narrowing if decision.supersedes else fresh).append(memory)
        added = superseded = 0
        total = len(fresh) + len(narrowing)
        for start in range(0, len(fresh), IMPORT_BATCH):
            batch = fresh[start : start + IMPORT_BATCH]
            results = await self.store.add_many(user_key=user_key, memories=batch, dedupe=None)
            added += sum(r.status == "added" for r in results)
            if progress is not None:
                progress(start + len(batch), total)
            await asyncio.sleep(IMPORT_PAUSE_S)  # another process's writes get their turn
        # A line that narrows a known memory goes through the store's own dedupe, which
        # supersedes the general memory (stored, or an earlier line written above).
        for done, memory in enumerate(narrowing, start=len(fresh) + 1):
            result = await self.store.add(user_key=user_key, memory=memory, dedupe=self.deduper)
            added += result.status == "added"
            superseded += len(result.superseded)
            if progress is not None and (done == total or done % IMPORT_BATCH == 0):
                progress(done, total)
        duplicates = len(memories) - added
        self.metrics.memories_stored("import", added)
        logger.info(
            "import user=%s added=%s duplicates=%s superseded=%s",
            user_key,
            added,
            duplicates,
            superseded,
        )
        return ImportResult(added=added, duplicates=duplicates, superseded=superseded)
