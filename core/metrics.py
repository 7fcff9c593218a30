"""Operational metrics (Prometheus, through the official ``prometheus_client``) and readiness.

One :class:`Metrics` per process, over a ``CollectorRegistry`` created at run time and passed
in (never the library's global registry), so tests can run several bots in one process.
``Metrics()`` without a registry records nothing and never imports ``prometheus_client``
(memory-only commands stay fast). Each recording is one call from the place where the thing
happens; :mod:`core.health` serves the registry at ``/metrics``.

Series (``_total`` counters; label values are fixed words, never message text, a user's name
or id, or a workspace id):

=============================================  ==============================================
``selfmind_messages_received_total{platform}`` user messages stored for an answer;
                                               ``platform``: a registered platform's name
                                               (slack, discord, cli) or other
``selfmind_answer_latency_seconds``            histogram: from the start of a turn (history,
                                               recall) to the answer's last token, answers
                                               that finished
``selfmind_reflection_queue_depth``            reflections queued or running
``selfmind_reflections_failed_total``          reflection attempts that failed (retried, or
                                               then skipped)
``selfmind_reflections_skipped_total``         reflections given up after ``max_attempts``
``selfmind_claude_errors_total{kind}``         failed Claude calls after the SDK's retries;
                                               ``kind`` in :data:`ERROR_KINDS`
``selfmind_claude_tokens_total{call,kind}``    tokens the API reported; ``call`` what the
                                               call was for, as ``selfmind usage`` names it
                                               (:data:`core.types.CallKind`: chat,
                                               reflection, cleanup, consolidation), ``kind``
                                               input, output, cache_read, cache_write
``selfmind_memories_stored_total{source}``     new memories (not duplicates): reflection,
                                               remember, import
``selfmind_memories_refused_total{source}``    memories not stored because they carry a
                                               secret: reflection (candidates dropped),
                                               remember, import (files refused)
``selfmind_memories_forgotten_total``          memories a user forgot (``/forget``, ``/forget
                                               all``)
``selfmind_recall_records_dropped_total``      delivered answers whose recalls (the memories
                                               their prompt carried) were not recorded: the
                                               answer was stored all the same
``selfmind_consolidation_changes_total{op}``   memories consolidation while quiet took out
                                               of recall (``op``: merged, superseded,
                                               retired) and users tidied (``op``: users)
``selfmind_consolidation_stops_total{reason}`` nights a consolidation stopped early
                                               (``reason``: budget, window, error)
``selfmind_ready``                             1 when :class:`Readiness` says ready, else 0
``selfmind_platform_connected``                1 while connected to Slack or Discord
``selfmind_platform_reconnects_total``         connections after the first one
``selfmind_platform_down_seconds``             seconds since the last disconnect (or since
                                               start when never connected); 0 when connected
=============================================  ==============================================
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.errors import MalformedOutput, StreamCutError
from core.platforms import platform_of_key

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from core.types import CallKind


class TokenCounts(Protocol):
    """What :meth:`Metrics.tokens` reads of a call's usage (``core.model.claude.Usage`` has it)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_read_input_tokens(self) -> int: ...
    @property
    def cache_creation_input_tokens(self) -> int: ...


E = TypeVar("E", bound=BaseException)

ERROR_KINDS = (
    "rate_limit",
    "overloaded",
    "server",
    "auth",
    "refused",
    "timeout",
    "connection",
    "stream_cut",
    "malformed_output",
    "other",
)
LATENCY_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Answer latency buckets in seconds: adaptive thinking makes answers of a minute or more
normal; the last bucket is the SDK's default request timeout (600 s)."""


def platform_of(user_key: str) -> str:
    """The platform word of a user key (``slack:T1:U1`` -> ``slack``); ``other`` unless a
    platform of that name is registered (:mod:`core.platforms`), so no part of a key beyond
    the platform can reach a label."""
    platform, _ = platform_of_key(user_key)
    return platform.name if platform is not None else "other"


def error_kind(error: BaseException, cause: BaseException | None = None) -> str:
    """The kind of a failed Claude call, one of :data:`ERROR_KINDS`.

    ``StreamCutError`` and ``MalformedOutput`` by class; otherwise from the SDK exception
    (``cause``, else ``error.__cause__`` of a ``ModelError`` as :mod:`core.model.claude` raises
    them) by its HTTP status and error type, the same table as :mod:`core.model.claude`'s user
    messages: 401/403 auth, 429 rate_limit, 529 overloaded, other 5xx server, other statuses
    refused; timeouts and connection errors by class name (read without importing the SDK).
    """
    if isinstance(error, StreamCutError):
        return "stream_cut"
    if isinstance(error, MalformedOutput):
        return "malformed_output"
    cause = cause or error.__cause__ or error
    name = type(cause).__name__
    if "Timeout" in name:
        return "timeout"
    if "Connection" in name:
        return "connection"
    status = getattr(cause, "status_code", None)
    error_type = getattr(cause, "type", None)
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return "auth"
    if status == 429 or error_type == "rate_limit_error":
        return "rate_limit"
    if status == 529 or error_type == "overloaded_error":
        return "overloaded"
    if (isinstance(status, int) and status >= 500) or error_type == "api_error":
        return "server"
    if isinstance(status, int):
        return "refused"
    return "other"


class Readiness:
    """Whether this process can serve: the store is open and the platform connected.

    The runtime calls :meth:`store_opened` / :meth:`store_closed`; adapters call
    :meth:`connected` / :meth:`disconnected` from their connection callbacks (Socket Mode
    connected, HTTP server listening, Discord ``on_ready`` / ``on_resumed`` /
    ``on_disconnect``). Times: ``clock`` is monotonic seconds, ``now`` wall time (UTC).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._clock = clock
        self._now = now
        self.store_open = False
        self.platform: str | None = None
        self.is_connected = False
        self.reconnects = 0
        self._ever_connected = False
        self._changed_at = clock()
        self._changed_wall = now()

    def store_opened(self) -> None:
        """The store is open (called by the runtime once migrations ran)."""
        self.store_open = True

    def store_closed(self) -> None:
        """The store is closing (called by the runtime on the way out)."""
        self.store_open = False

    def connected(self, platform: str) -> None:
        """The adapter reached its platform (again: counted in ``reconnects``)."""
        self.platform = platform
        if self.is_connected:
            return
        if self._ever_connected:
            self.reconnects += 1
        self._ever_connected = True
        self.is_connected = True
        self._mark()

    def disconnected(self, platform: str) -> None:
        """The adapter lost its platform connection (or is shutting down)."""
        self.platform = platform
        if self.is_connected:
            self.is_connected = False
            self._mark()

    def _mark(self) -> None:
        self._changed_at = self._clock()
        self._changed_wall = self._now()

    @property
    def ready(self) -> bool:
        """Store open and platform connected."""
        return self.store_open and self.is_connected

    @property
    def down_s(self) -> float:
        """Seconds since the last disconnect (since start if never connected); 0 when up."""
        return 0.0 if self.is_connected else max(0.0, self._clock() - self._changed_at)

    def report(self) -> dict[str, Any]:
        """The ``/healthz`` body: ``ready``, ``not_ready`` (``store``, ``platform``), and the
        platform's state with ``since`` (ISO 8601 UTC) and ``down_s``."""
        not_ready = [
            part
            for part, ok in (("store", self.store_open), ("platform", self.is_connected))
            if not ok
        ]
        return {
            "ready": not not_ready,
            "not_ready": not_ready,
            "store": {"open": self.store_open},
            "platform": {
                "name": self.platform,
                "connected": self.is_connected,
                "since": self._changed_wall.isoformat(timespec="seconds"),
                "down_s": round(self.down_s, 3),
                "reconnects": self.reconnects,
            },
        }


class Metrics:
    """The process's metric objects over ``registry``; without one every call is a no-op.

    See the module docstring for the series. Methods never raise on odd input (a count of 0
    or less records nothing).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry
        if registry is None:
            return
        from prometheus_client import Counter, Histogram

        self._messages = Counter(
            "selfmind_messages_received",
            "User messages stored for an answer.",
            ["platform"],
            registry=registry,
        )
        self._latency = Histogram(
            "selfmind_answer_latency_seconds",
            "Seconds from the start of a turn to the answer's last token.",
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self._failed = Counter(
            "selfmind_reflections_failed", "Reflection attempts that failed.", registry=registry
        )
        self._skipped = Counter(
            "selfmind_reflections_skipped",
            "Reflections given up after the last attempt.",
            registry=registry,
        )
        self._errors = Counter(
            "selfmind_claude_errors", "Failed Claude calls by kind.", ["kind"], registry=registry
        )
        self._tokens = Counter(
            "selfmind_claude_tokens",
            "Tokens the Anthropic API reported, by call and kind.",
            ["call", "kind"],
            registry=registry,
        )
        self._stored = Counter(
            "selfmind_memories_stored",
            "New memories stored (duplicates not counted), by source.",
            ["source"],
            registry=registry,
        )
        self._forgotten = Counter(
            "selfmind_memories_forgotten", "Memories users forgot.", registry=registry
        )
        self._tidied = Counter(
            "selfmind_consolidation_changes",
            "Memories consolidation took out of recall, by operation (and users tidied).",
            ["op"],
            registry=registry,
        )
        self._tidy_stops = Counter(
            "selfmind_consolidation_stops",
            "Nights a consolidation stopped early, by reason.",
            ["reason"],
            registry=registry,
        )
        self._refused = Counter(
            "selfmind_memories_refused",
            "Memories not stored because they carry a secret, by source.",
            ["source"],
            registry=registry,
        )

    @classmethod
    def create(cls) -> Metrics:
        """Metrics over a new, empty ``CollectorRegistry`` of their own."""
        from prometheus_client import CollectorRegistry

        return cls(CollectorRegistry())

    @property
    def enabled(self) -> bool:
        """True when recording into a registry."""
        return self.registry is not None

    def watch(
        self,
        *,
        readiness: Readiness,
        queue_depth: Callable[[], int] | None,
        recall_drops: Callable[[], int] | None = None,
    ) -> None:
        """Export ``readiness``, the reflection queue depth and the recall records the store
        dropped (``RecallLog.recall_records_dropped``), read at each scrape."""
        if self.registry is not None:
            self.registry.register(_Watched(readiness, queue_depth, recall_drops))

    def message_received(self, user_key: str) -> None:
        """One user message stored for an answer (label: the key's platform only)."""
        if self.registry is not None:
            self._messages.labels(platform=platform_of(user_key)).inc()

    def answered(self, started: float) -> None:
        """An answer finished; ``started`` is ``time.monotonic()`` at the turn's start."""
        if self.registry is not None:
            self._latency.observe(max(0.0, time.monotonic() - started))

    def reflection_failed(self) -> None:
        """One reflection attempt failed (a Claude error, or a crash)."""
        if self.registry is not None:
            self._failed.inc()

    def reflection_skipped(self) -> None:
        """A reflection was given up after its last attempt."""
        if self.registry is not None:
            self._skipped.inc()

    def claude_error(self, error: E, cause: BaseException | None = None) -> E:
        """Count a failed Claude call by :func:`error_kind` (``cause``: the SDK exception,
        when not yet ``error.__cause__``); returns ``error``, for ``raise
        metrics.claude_error(...)``."""
        if self.registry is not None:
            self._errors.labels(kind=error_kind(error, cause)).inc()
        return error

    def tokens(self, *, call: CallKind, usage: TokenCounts) -> None:
        """Count one call's reported ``usage`` under ``call``, what it was for (a
        :data:`core.types.CallKind`: chat, reflection, cleanup, consolidation)."""
        if self.registry is None:
            return
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_input_tokens),
            ("cache_write", usage.cache_creation_input_tokens),
        ):
            if count > 0:
                self._tokens.labels(call=call, kind=kind).inc(count)

    def memories_stored(self, source: str, count: int = 1) -> None:
        """``count`` new memories from ``source`` (reflection, remember, import)."""
        if self.registry is not None and count > 0:
            self._stored.labels(source=source).inc(count)

    def secrets_refused(self, source: str, count: int = 1) -> None:
        """``count`` memories from ``source`` not stored because they carry a secret."""
        if self.registry is not None and count > 0:
            self._refused.labels(source=source).inc(count)

    def consolidated(self, *, merged: int, superseded: int, retired: int) -> None:
        """One user tidied by consolidation: memories merged into others, superseded and
        retired (each counted under its ``op``), and one under ``users``."""
        if self.registry is None:
            return
        self._tidied.labels(op="users").inc()
        for op, count in (("merged", merged), ("superseded", superseded), ("retired", retired)):
            if count > 0:
                self._tidied.labels(op=op).inc(count)

    def consolidation_stopped(self, reason: str) -> None:
        """A night's consolidation stopped early: ``budget``, ``window`` or ``error``."""
        if self.registry is not None:
            self._tidy_stops.labels(reason=reason).inc()

    def memories_forgotten(self, count: int = 1) -> None:
        """``count`` memories forgotten by their user."""
        if self.registry is not None and count > 0:
            self._forgotten.inc(count)


class _Watched:
    """A collector reading readiness and the queue depth at scrape time."""

    def __init__(
        self,
        readiness: Readiness,
        queue_depth: Callable[[], int] | None,
        recall_drops: Callable[[], int] | None = None,
    ) -> None:
        self.readiness = readiness
        self.queue_depth = queue_depth
        self.recall_drops = recall_drops

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        r = self.readiness
        depth = self.queue_depth() if self.queue_depth is not None else 0
        yield GaugeMetricFamily(
            "selfmind_reflection_queue_depth", "Reflections queued or running.", value=depth
        )
        yield GaugeMetricFamily(
            "selfmind_ready", "1 when the store is open and the platform connected.", r.ready
        )
        yield GaugeMetricFamily(
            "selfmind_platform_connected",
            "1 while connected to the chat platform.",
            value=r.is_connected,
        )
        yield CounterMetricFamily(
            "selfmind_platform_reconnects",
            "Platform connections after the first one.",
            value=r.reconnects,
        )
        yield GaugeMetricFamily(
            "selfmind_platform_down_seconds",
            "Seconds since the platform connection was lost; 0 when connected.",
            value=r.down_s,
        )
        yield CounterMetricFamily(
            "selfmind_recall_records_dropped",
            "Delivered answers whose recalls were not recorded.",
            value=self.recall_drops() if self.recall_drops is not None else 0,
        )


__all__ = ["ERROR_KINDS", "Metrics", "Readiness", "error_kind", "platform_of"]
