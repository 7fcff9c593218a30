"""Consolidation while quiet: a nightly cleanup of each user active since the last night.

Opt-in (``SELFMIND_CONSOLIDATION=true``; off by default, and with it off nothing runs: no
task is started and :meth:`Consolidator.run_night` returns None at once). When on, the chat
runtime checks every :data:`TICK_S` seconds; inside the operator's window
(``SELFMIND_CONSOLIDATION_WINDOW``, ``HH:MM-HH:MM`` UTC, may span midnight) the first check
of a night claims it (:meth:`core.store.seams.ClaimStore.mark_once` of ``tidy:<date the
window opened>``, one row that every process sharing the database sees: with several
processes on PostgreSQL exactly one runs the night; a process that dies mid-night leaves the
rest of that night undone, and its users are picked up the next night they are active) and
runs it:

- the users: every user with at least ``cleanup_min_memories`` active memories and any
  activity (a message, a memory written or changed) in the 24 hours before the window
  opened, other than a consolidation of their own
  (:func:`core.memory.tidy_notes.last_tidy`) or its undo;
- each user's tidy is the existing cleanup (:class:`core.memory.cleanup.Cleaner`: merge
  rephrasings, supersede contradicted facts, retire transient ones; its checks, the
  ``/remember`` protection and the dedupe of merged sentences), applied as **one undoable
  change** whose id starts ``tidy-`` (``tidy-20261205-3fa2c1``);
- **end dated facts**, in the same change: offline, every memory that names when it ends
  but carries no days gets them, and every memory past its last day that is still told in
  the present is told as past (:meth:`Consolidator.end_dated`, :func:`core.rules.when.ended`:
  no tokens); with Claude, the cleanup's "end" gives its last day to a time-bound fact a
  later memory shows is over ("until the migration is done"). Each is a rewording: the old
  memory superseded by the dated one, so the undo puts it back; a past one leaves the
  standing profile and recall still finds it, told as past;
- the budget: ``SELFMIND_CONSOLIDATION_DAILY_TOKENS`` for the whole deployment per UTC day,
  counted as every token of the day's cleanup calls in the usage table: the consolidation's
  own (recorded as ``consolidation``) and users' ``/memories cleanup`` (``cleanup``), which
  spends the same budget, so background cleanup never costs more than the operator set.
  Before each user the budget left is read and the user's plan stops sending batches once
  it is spent (what was planned is applied); the night stops there, and also at the
  window's end.

What it did is told where the user looks: the Slack Home tab and ``/memory`` say "Tidied 3
memories last night" with an undo (:mod:`core.memory.tidy_notes`); metrics count the
memories per operation and the nights stopped early (:mod:`core.metrics`); the usage report
(``selfmind usage``) has its tokens on their own line, ``consolidation``; the log line per
user names counts and ids, never text.

Cost (``python bench/consolidation.py``, the fake Anthropic API): see docs/memory.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol

from core.errors import SelfMindError, StoreError
from core.memory.cleanup import Cleaner, CleanupRun, PlannedOp, apply_run
from core.memory.tidy_notes import PREFIX, is_tidy
from core.metrics import Metrics
from core.rules.cleanup_ops import MergeOp, SupersedeOp, op_ids
from core.rules.when import ended
from core.store.channels import ChannelStore, channel_keys
from core.store.seams import ClaimStore, CleanupStore, MemoryStore, UsageStore
from core.types import MAX_MEMORY_CHARS, Memory, utcnow

logger = logging.getLogger(__name__)

TICK_S = 300.0
"""Seconds between two checks of the scheduler (a night starts at most this late)."""
ACTIVE_HOURS = 24
"""A user is tidied when active in this many hours before the window opened."""
_WINDOW = re.compile(r"^([0-9]{2}):([0-9]{2})-([0-9]{2}):([0-9]{2})$")


class ConsolidationStore(MemoryStore, CleanupStore, UsageStore, ClaimStore, ChannelStore, Protocol):
    """What consolidation uses of the store: users and history, cleanup changes, usage
    (the budget), claims (one process a night) and the channels (whose keys are no user's)."""


@dataclass(frozen=True, slots=True)
class Window:
    """The operator's window, UTC: ``start`` to ``end`` (spanning midnight when ``end`` is
    not after ``start``; the same times: the whole day)."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> Window:
        """``"02:00-05:00"`` as a window; ValueError for anything else."""
        m = _WINDOW.match(text.strip())
        if not m or int(m[1]) > 23 or int(m[3]) > 23 or int(m[2]) > 59 or int(m[4]) > 59:
            raise ValueError(f"not a window HH:MM-HH:MM: {text!r}")
        return cls(time(int(m[1]), int(m[2])), time(int(m[3]), int(m[4])))

    def opened(self, now: datetime) -> datetime | None:
        """When the window holding ``now`` (aware, any zone) opened, UTC; None outside."""
        now = now.astimezone(UTC)
        today = datetime.combine(now.date(), self.start, UTC)
        length = datetime.combine(now.date(), self.end, UTC) - today
        if length <= timedelta(0):
            length += timedelta(days=1)
        for opened in (today, today - timedelta(days=1)):
            if opened <= now < opened + length:
                return opened
        return None


@dataclass
class UserNight:
    """One user's tidy: the change (None: nothing to change), memories taken out of recall,
    calls and tokens; ``dated``: of the tidied, the facts given their days or told as past
    (:meth:`Consolidator.end_dated` and the plan's "end")."""

    user_key: str
    change_id: str | None
    tidied: int
    calls: int
    tokens: int
    dated: int = 0


@dataclass
class NightReport:
    """A night's run: ``night`` the date its window opened; ``stopped``: ``budget`` or
    ``window`` when users were left, else None."""

    night: date
    users: list[UserNight] = field(default_factory=list)
    stopped: str | None = None
    failed: int = 0

    @property
    def calls(self) -> int:
        """Claude calls of the night."""
        return sum(u.calls for u in self.users)

    @property
    def tokens(self) -> int:
        """Tokens of the night (input, cache and output)."""
        return sum(u.tokens for u in self.users)


def _tokens(run: CleanupRun) -> int:
    u = run.usage
    return (
        u.input_tokens + u.output_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
    )


def _tidied(run: CleanupRun) -> int:
    a = run.applied
    return 0 if a is None else len(a.superseded) + len(a.retired)


class Consolidator:
    """Runs consolidation nights (see the module docstring).

    ``clock``: the time now (aware UTC; tests pass a virtual clock); ``enabled``,
    ``window``, ``daily_tokens`` and ``min_memories`` as the settings
    ``consolidation``, ``consolidation_window``, ``consolidation_daily_tokens`` and
    ``cleanup_min_memories``.
    """

    def __init__(
        self,
        *,
        store: ConsolidationStore,
        cleaner: Cleaner,
        enabled: bool,
        window: Window,
        daily_tokens: int,
        min_memories: int = 20,
        metrics: Metrics | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.cleaner = cleaner
        self.enabled = enabled
        self.window = window
        self.daily_tokens = daily_tokens
        self.min_memories = min_memories
        self.metrics = metrics or Metrics()
        self.clock = clock

    async def spent_today(self, now: datetime) -> int:
        """Tokens of every cleanup call (``consolidation`` and users' ``cleanup``) recorded
        since ``now``'s UTC midnight."""
        midnight = datetime.combine(now.astimezone(UTC).date(), time(0), UTC)
        rows = await self.store.usage_report(since=midnight, by="kind")
        return sum(r.total_tokens for r in rows if r.key in ("cleanup", "consolidation"))

    async def users_to_tidy(self, opened: datetime) -> list[str]:
        """Users with enough memories and activity of their own in the
        :data:`ACTIVE_HOURS` before ``opened`` (their own tidy or its undo is not activity),
        in key order."""
        since = opened - timedelta(hours=ACTIVE_HOURS)
        out = []
        channels = await channel_keys(self.store)  # a channel's entries are not a user's
        for u in await self.store.users():
            if u.user_key in channels:
                continue
            if u.memories < self.min_memories or u.last_active is None or u.last_active < since:
                continue
            newest = await self.store.history(user_key=u.user_key, limit=1, newest_first=True)
            if newest and is_tidy(newest[0]) and u.last_active <= newest[0].at:
                continue  # nothing since the last tidy (or its undo) but the tidy itself
            out.append(u.user_key)
        return out

    def end_dated(
        self, memories: Sequence[Memory], now: datetime, *, skip: Collection[int] = ()
    ) -> list[PlannedOp]:
        """The offline part of "end dated facts" on ``now``'s UTC day: for each active
        memory not in ``skip`` (those the plan already changes) that
        :func:`core.rules.when.ended` changes (an undated memory whose text names when it
        ends, read against the day it was stored; a past one still told in the present),
        a rewording into that text with those days (a one-memory
        :class:`core.rules.cleanup_ops.MergeOp` with ``days``: kind, category, source,
        place, creation time and whose fact it is kept). A ``/remember`` memory is flagged
        as such. Pure: no store, no tokens."""
        today = now.astimezone(UTC).date()
        out = []
        for m in memories:
            if m.id in skip or not m.active:
                continue
            stored = m.created_at.astimezone(UTC).date()
            new = ended(
                m.text, valid_from=m.valid_from, valid_until=m.valid_until, stored=stored,
                today=today,
            )  # fmt: skip
            if new is None or len(new.text) >= MAX_MEMORY_CHARS:
                continue  # an over-long memory is the audit's (too_long), not reworded
            past = new.valid_until is not None and new.valid_until < today
            out.append(
                PlannedOp(
                    MergeOp(
                        (m.id,), new.text, m.kind, m.category, (new.valid_from, new.valid_until)
                    ),
                    "ended: told as past" if past else "dated: the days its text names",
                    (m.id,) if m.source == "remember" else (),
                )
            )
        return out

    async def run_night(self) -> NightReport | None:
        """Run tonight's consolidation if it is on, the clock is inside the window and no
        process ran (or runs) this night yet; None otherwise (nothing read, nothing
        spent)."""
        if not self.enabled:
            return None
        opened = self.window.opened(self.clock())
        if opened is None:
            return None
        night = opened.date()
        if not await self.store.mark_once(mark=f"tidy:{night.isoformat()}"):
            return None  # this night is another process's (or done)
        report = NightReport(night)
        for user_key in await self.users_to_tidy(opened):
            now = self.clock()
            if self.window.opened(now) != opened:
                report.stopped = "window"
                break
            left = self.daily_tokens - await self.spent_today(now)
            if left <= 0:
                report.stopped = "budget"
                break
            try:
                done = await self._tidy(user_key, night, left, now)
            except SelfMindError as exc:
                report.failed += 1
                self.metrics.consolidation_stopped("error")
                logger.warning("consolidation user=%s failed: %s", user_key, type(exc).__name__)
                continue
            report.users.append(done[0])
            if done[1]:
                report.stopped = "budget"
                break
        if report.stopped:
            self.metrics.consolidation_stopped(report.stopped)
        logger.info(
            "consolidation night=%s users=%d changes=%d tidied=%d calls=%d tokens=%d stopped=%s",
            night,
            len(report.users),
            sum(u.change_id is not None for u in report.users),
            sum(u.tidied for u in report.users),
            report.calls,
            report.tokens,
            report.stopped,
        )
        return report

    async def _tidy(
        self, user_key: str, night: date, budget: int, now: datetime
    ) -> tuple[UserNight, bool]:
        run = await self.cleaner.plan(
            user_key=user_key,
            token_budget=budget,
            kind="consolidation",
            today=now.astimezone(UTC).date(),
        )
        memories = await self.store.export(user_key=user_key)
        touched = {i for p in run.planned for i in op_ids(p.op)}
        touched |= {p.op.new_id for p in run.planned if isinstance(p.op, SupersedeOp)}
        run.planned.extend(self.end_dated(memories, now, skip=touched))
        change_id = f"{PREFIX}{night:%Y%m%d}-{secrets.token_hex(3)}"
        try:
            await apply_run(self.store, run, change_id=change_id)
        except StoreError as exc:  # a memory changed meanwhile: left for the next night
            logger.info("consolidation user=%s not applied: %s", user_key, exc)
        a = run.applied
        dated = [p for p in run.planned if isinstance(p.op, MergeOp) and p.op.days is not None]
        if a is not None:
            merged = sum(
                len(p.op.ids)
                for p in run.planned
                if isinstance(p.op, MergeOp) and p.op.days is None
            )
            self.metrics.consolidated(
                merged=merged, superseded=len(a.superseded) - merged, retired=len(a.retired)
            )
        done = UserNight(
            user_key,
            a.change_id if a is not None else None,
            _tidied(run),
            run.calls,
            _tokens(run),
            len(dated) if a is not None else 0,
        )
        logger.info(
            "consolidation user=%s change=%s tidied=%d dated=%d calls=%d tokens=%d",
            user_key,
            done.change_id,
            done.tidied,
            done.dated,
            done.calls,
            done.tokens,
        )
        return done, run.stopped

    async def serve(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Check every :data:`TICK_S` seconds, forever (the runtime's task; cancelled at
        stop). A failed night is logged and tried again at the next check."""
        while True:
            try:
                await self.run_night()
            except SelfMindError as exc:
                logger.warning("consolidation failed: %s", type(exc).__name__)
            await sleep(TICK_S)
