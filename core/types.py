"""Plain data shared by the core and the adapters (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Literal, get_args

Kind = Literal["fact", "preference", "correction", "context"]
Category = Literal["communication", "code", "tools", "workflow", "general"]
Source = Literal["reflection", "remember", "import"]
Origin = Literal["private", "shared"]
EventKind = Literal["added", "superseded", "forgotten", "retired", "restored"]

KINDS: tuple[str, ...] = get_args(Kind)
CATEGORIES: tuple[str, ...] = get_args(Category)
SOURCES: tuple[str, ...] = get_args(Source)
ORIGINS: tuple[str, ...] = get_args(Origin)

PlaceKind = Literal["dm", "group_dm", "private_channel", "public_channel"]
PLACE_KINDS: tuple[str, ...] = get_args(PlaceKind)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message was said, and so where what is learned from it may be used.

    ``platform``: ``slack`` | ``discord`` | ``cli``; ``workspace``: the Slack team (or the
    enterprise, on Enterprise Grid) or the Discord guild, ``None`` for a DM outside any
    (Discord DMs, the terminal); ``channel``: the channel's id (a thread's parent channel,
    a forum post's forum), ``None`` for the terminal; ``kind``: the person's DM with the bot,
    a group DM, a private channel or a public channel.
    """

    platform: str
    kind: PlaceKind
    workspace: str | None = None
    channel: str | None = None

    @property
    def is_channel(self) -> bool:
        """A private or public channel (a team's place), not a DM or a group DM."""
        return self.kind in ("private_channel", "public_channel")

    @property
    def channel_key(self) -> str | None:
        """``slack:{team}:{channel}`` | ``discord:{guild}:{channel}`` for a channel (the key
        of its own memory), else ``None``."""
        if not self.is_channel or self.channel is None:
            return None
        return f"{self.platform}:{self.workspace or ''}:{self.channel}"


@dataclass(frozen=True, slots=True)
class ChannelInfo:
    """One channel the bot has seen and its own memory's settings (team memory,
    :mod:`core.memory.team`).

    ``key``: :attr:`Place.channel_key`; ``kind``: the channel's kind when last seen;
    ``memory_on``: its memory is on (off by default); ``memory_kind``: the kind the memory
    was turned on (or last reviewed) under: a private channel's memory stays private when the
    channel becomes public (:attr:`needs_review`); ``changed_by``/``changed_at``: who turned
    it on or off last, and when (aware UTC); ``allowed``: the user keys who may turn it on or
    off (empty: any member); ``entries``: its active entries.
    """

    key: str
    platform: str
    kind: PlaceKind
    workspace: str | None = None
    channel: str = ""
    memory_on: bool = False
    memory_kind: PlaceKind | None = None
    changed_by: str | None = None
    changed_at: datetime | None = None
    allowed: tuple[str, ...] = ()
    entries: int = 0
    revision: str = ""
    """Changes whenever its entries or their attribution change (a cache key)."""

    @property
    def needs_review(self) -> bool:
        """A memory kept while the channel was private, the channel public now: unused
        until someone in the channel reviews it (turns it on again)."""
        return self.memory_kind == "private_channel" and self.kind != "private_channel"

    @property
    def in_use(self) -> bool:
        """Its memory is used in answers and learns from the channel's exchanges."""
        return self.memory_on and not self.needs_review


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a channel memory entry comes from: ``said_by`` (a user key) and ``said_by_name``
    (None once that person ran ``/forget all``), ``said_at`` (aware UTC), ``link`` to the
    message (Slack permalink, Discord jump URL; None when unknown), ``changed_by`` the user
    key who added, corrected or forgot it last."""

    memory_id: int
    said_at: datetime
    said_by: str | None = None
    said_by_name: str | None = None
    link: str | None = None
    changed_by: str | None = None


MAX_MEMORY_CHARS = 200
"""A memory is one standalone sentence under 200 characters (the product's memory rule)."""


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory of one user."""

    id: int
    user_key: str
    text: str
    kind: Kind
    category: Category
    source: Source
    origin: Origin
    created_at: datetime
    updated_at: datetime
    conversation_key: str | None = None
    superseded_by: int | None = None
    about: str | None = None
    """Whom the memory is about: None for the user, else the other person as the text
    names them ("the user's manager", "Sarah"; :mod:`core.rules.about`)."""
    valid_from: date | None = None
    """The first day the memory holds (a trip's first day), None: since always."""
    valid_until: date | None = None
    """The last day the memory holds (a trip's last day, a deadline), None: no end."""

    @property
    def about_user(self) -> bool:
        """True when the memory is about the user, not another person."""
        return self.about is None

    def past(self, today: date) -> bool:
        """True once its last day (:attr:`valid_until`) is before ``today``."""
        return self.valid_until is not None and self.valid_until < today

    place: Place | None = None
    """Where it was learned (None: the owner's DM); :mod:`core.rules.places` says where it
    may be used."""

    @property
    def active(self) -> bool:
        """True while the memory takes part in recall (not superseded or retired)."""
        return self.superseded_by is None

    @property
    def retired(self) -> bool:
        """True when a cleanup retired it (marked superseded by itself)."""
        return self.superseded_by == self.id


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be written: the text and its labels, without id or owner."""

    text: str
    kind: Kind = "fact"
    category: Category = "general"
    source: Source = "remember"
    origin: Origin = "private"
    conversation_key: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    about: str | None = None
    valid_from: date | None = None
    valid_until: date | None = None
    place: Place | None = None
    """Where it was learned (None: the owner's DM, the narrowest; :mod:`core.rules.places`)."""


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """One memory a reflection writes and the ids of the stored memories it replaces
    (:meth:`core.store.seams.ReflectionQueue.finish_reflection`)."""

    memory: NewMemory
    supersedes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TeamWrite:
    """What a reflection on a channel's exchange teaches the channel's own memory, written
    in the reflection's transaction (:meth:`core.store.seams.ReflectionQueue.finish_reflection`):
    ``memories`` owned by ``channel_key``, each new one attributed as ``said`` (its
    ``memory_id`` is replaced by the entry's)."""

    channel_key: str
    memories: tuple[NewMemory, ...]
    said: Attribution


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A recalled memory and its BM25 score (higher is better)."""

    memory: Memory
    score: float


@dataclass(frozen=True, slots=True)
class AddResult:
    """What happened to one write: ``added`` (``id`` is new) or ``duplicate`` of ``id``;
    ``superseded``: the ids of the memories ``id`` replaced in the same write (named by the
    writer, or less specific versions of it that dedupe found); ``text``: the text as stored,
    when the writer reports it (``MemoryService.remember``), else ""; ``left_out``: the
    secret the writer left out of the text it was given, named ("a password"), else ""."""

    id: int
    status: Literal["added", "duplicate"]
    superseded: tuple[int, ...] = ()
    text: str = ""
    left_out: str = ""

    @property
    def duplicate_of(self) -> int | None:
        return self.id if self.status == "duplicate" else None


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """How one memory was used (:class:`core.store.seams.RecallLog`): ``recalls``, the
    delivered answers whose prompt carried it (in the standing profile or recalled), the last
    at ``last_recalled_at`` (aware UTC; None: never); ``confirmations``, the writes found to
    be duplicates of it (``/remember`` answered "already knew", a reflection's duplicate
    candidate)."""

    recalls: int = 0
    last_recalled_at: datetime | None = None
    confirmations: int = 0


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """One row of a user's memory history. Forgotten memories keep only id and event."""

    memory_id: int
    event: EventKind
    at: datetime
    conversation_key: str | None = None
    related_id: int | None = None
    change_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Counts of active memories."""

    total: int
    by_kind: dict[str, int] = field(default_factory=dict)
    by_category: dict[str, int] = field(default_factory=dict)


ReflectionState = Literal["answering", "pending", "done", "skipped", "off"]
MemoryMode = Literal["on", "paused", "off"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One stored message of a conversation (a user's message or the assistant's answer)."""

    id: int
    conversation_key: str
    user_key: str | None
    role: Literal["user", "assistant"]
    text: str
    origin: Origin
    sent_at: datetime
    author: str | None = None
    reply_to: int | None = None
    reflection: ReflectionState | None = None
    attempts: int = 0
    platform_ref: str | None = None
    workspace: str | None = None
    reply_ref: str | None = None
    """A user turn's answer in progress on the platform (its message ids, space-separated;
    :meth:`core.store.seams.TurnStore.set_reply_ref`), None when none was recorded."""
    thread_ref: str | None = None
    """The platform thread the message was said in when its conversation key does not name
    it (Slack: the ``thread_ts`` of a DM thread), so an answer recovered after a crash goes
    back into that thread; None elsewhere."""
    place: Place | None = None
    """Where it was said (None: not recorded, a turn stored before places were); what is
    learned from it is learned there (:mod:`core.rules.places`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewTurn:
    """One message to store (:meth:`core.store.seams.TurnStore.add_turn`): ``role`` is
    ``user`` or ``assistant``; ``sent_at`` the platform's time (aware UTC); ``reply_to`` the
    turn id it answers; ``reflection`` ``answering`` for a user message about to be answered;
    ``platform_ref`` the platform's message id (Slack ts, Discord snowflake); ``workspace``
    the Slack team (None elsewhere); ``thread_ref`` the thread it was said in
    (:attr:`Turn.thread_ref`)."""

    conversation_key: str
    user_key: str | None
    role: str
    text: str
    origin: Origin
    sent_at: datetime
    author: str | None = None
    reply_to: int | None = None
    reflection: ReflectionState | None = None
    platform_ref: str | None = None
    workspace: str | None = None
    thread_ref: str | None = None
    place: Place | None = None


CallKind = Literal["chat", "reflection", "cleanup", "consolidation"]
"""What a Claude call was for, as the usage table records it: an answer, a reflection, a
user's own ``/memories cleanup`` or the nightly consolidation (:mod:`core.memory.consolidation`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRecord:
    """One Claude call's usage as the API reported it
    (:meth:`core.store.seams.UsageStore.record_usage`): token counts per the Messages API's
    ``usage`` object; ``at`` defaults to now (aware UTC)."""

    user_key: str
    workspace: str | None
    kind: CallKind
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    turn_id: int | None = None
    at: datetime | None = None


_USAGE_GROUPS = {
    "user": "user_key",
    "workspace": "COALESCE(workspace, '')",
    "kind": "kind",
    "model": "model",
}


def usage_group_column(by: str) -> str:
    """The SQL expression that groups usage ``by`` user, workspace, kind or model (both
    backends).

    Raises ``ValueError`` for anything else.
    """
    if by not in _USAGE_GROUPS:
        raise ValueError(f"by must be one of {', '.join(_USAGE_GROUPS)}")
    return _USAGE_GROUPS[by]


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Token counts of Claude calls, summed over a group (``key``: user, workspace, kind or
    model)."""

    key: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int

    @property
    def total_tokens(self) -> int:
        """Every token processed: input, cache reads and writes, and output."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
        )

    @property
    def cache_read_share(self) -> float:
        """Cache-read tokens as a share of all input tokens (0..1)."""
        prompt = self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens
        return self.cache_read_input_tokens / prompt if prompt else 0.0


@dataclass(frozen=True)
class UserSummary:
    """One user key the store knows (``selfmind users``): active memories, the user's own
    stored messages, and the latest of any of those (or a memory event), UTC; None if none."""

    user_key: str
    memories: int
    turns: int
    last_active: datetime | None
