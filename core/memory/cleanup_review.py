"""Reviewing a memory cleanup in a chat: the caller sees a plan, then applies or cancels it.

``/memories cleanup`` (Slack and Discord) asks :class:`CleanupReviews` for a plan
(:meth:`core.memory.cleanup.Cleaner.plan`; nothing is changed) and shows it only to the caller,
with Apply and Cancel buttons. The plan waits here, in this process's memory, under a random
plan id:

- only its owner (the same memory key) may apply or cancel it; for anyone else
  ``PlanNotPending`` says so and nothing changes;
- it expires after ``ttl_s`` (15 minutes); a user's new plan replaces their earlier one, and
  at most ``max_pending`` plans are kept (the oldest go first). A restart forgets them all;
- Apply applies exactly the plan shown, as one change (``store.apply_change``) that
  ``store.undo_change`` reverses. When the memories changed since (a planned memory was
  forgotten or cleaned up meanwhile) the store refuses the whole change: ``PlanNotPending``,
  nothing changed.

Planning costs Claude calls (at most ``cleanup_max_batches``), so the user's daily token cap
(:mod:`core.chat.controls`) is checked first. Adapters format the plan for their platform with
:func:`operation_lines`, :func:`fit_lines` and the sentences below, which both platforms share.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.errors import ConfigError, LimitReached, MemoryNotFound, PlanNotPending, StoreError
from core.memory.cleanup import Cleaner, CleanupRun
from core.rules.cleanup_ops import op_ids
from core.store.seams import CleanupStore, MemoryStore

logger = logging.getLogger(__name__)


class LimitCheck(Protocol):
    """The daily caps a plan counts against (:class:`core.chat.controls.Controls` is one)."""

    async def check_limits(self, *, user_key: str, workspace: str | None) -> None:
        """Raise ``LimitReached`` when the user or workspace has used up today's cap."""


PLAN_TTL_S = 15 * 60.0
"""A plan shown in a chat can be applied for this long."""
MAX_PENDING_PLANS = 256
"""Plans kept at once in one process (one per user; the oldest are dropped first)."""
USER_ADDED_MARK = "⚠️"
"""Starts the line of an operation that touches memories the user added with /remember."""

NO_MODEL = "Cleaning up needs Claude, and this bot has no ANTHROPIC_API_KEY."
NO_MEMORIES = "You have no memories to clean up."
PLANNING = "Looking through your memories for a cleanup plan; this can take a minute…"
NOTHING_TO_CLEAN = "Your memories look tidy: there is nothing to clean up."
UNUSABLE_PLAN = (
    "Claude's cleanup plan could not be used (it was malformed, broke a rule, or Claude did "
    "not answer), so nothing was changed. Please try again later."
)
CHANGED = (
    "Your memories changed since this plan was made, so nothing was changed. "
    "Run `/memories cleanup` again."
)
GONE = (
    "This cleanup plan is no longer pending (it expired, or was applied or cancelled); "
    "nothing was changed. Run `/memories cleanup` again."
)
NOT_YOURS = "This cleanup plan belongs to someone else; nothing was changed."
CANCELLED = "Cleanup cancelled; nothing was changed."


@dataclass(frozen=True)
class Proposal:
    """A planned cleanup. ``plan_id`` is None when there is nothing to apply; then
    ``message`` is the one line to answer instead of a plan."""

    run: CleanupRun
    plan_id: str | None

    @property
    def message(self) -> str | None:
        if self.plan_id is not None:
            return None
        if self.run.before == 0:
            return NO_MEMORIES
        return UNUSABLE_PLAN if self.run.rejected_batches else NOTHING_TO_CLEAN


@dataclass(frozen=True)
class _Pending:
    run: CleanupRun
    cleaner: Cleaner
    expires_at: float


class ReviewStore(MemoryStore, CleanupStore, Protocol):
    """What plan review uses of the store: memory counts and cleanup changes."""


class CleanupReviews:
    """Plans shown in chats, waiting for their owner's Apply or Cancel.

    ``clock`` is monotonic seconds (tests move it to expire plans).
    """

    def __init__(
        self,
        *,
        store: ReviewStore,
        cleaner: Cleaner | None,
        controls: LimitCheck | None = None,
        ttl_s: float = PLAN_TTL_S,
        max_pending: int = MAX_PENDING_PLANS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cleaner = cleaner
        self.controls = controls
        self.ttl_s = ttl_s
        self.max_pending = max(1, max_pending)
        self.clock = clock
        self._plans: OrderedDict[str, _Pending] = OrderedDict()

    @property
    def available(self) -> bool:
        """False without a Claude model (no ``ANTHROPIC_API_KEY``)."""
        return self.cleaner is not None

    async def precheck(self, *, user_key: str, workspace: str | None) -> str | None:
        """The one line to answer instead of planning (no model, a daily cap reached, no
        memories), or None to go ahead."""
        if not self.available:
            return NO_MODEL
        if self.controls is not None:
            try:
                await self.controls.check_limits(user_key=user_key, workspace=workspace)
            except LimitReached as exc:
                return str(exc)
        if await self.store.count(user_key=user_key) == 0:
            return NO_MEMORIES
        return None

    async def propose(self, *, user_key: str) -> Proposal:
        """Plan a cleanup of the user's memories (Claude calls; nothing changed) and keep it
        pending when it has operations. ``ConfigError`` without a model."""
        cleaner = self.cleaner
        if cleaner is None:
            raise ConfigError("ANTHROPIC_API_KEY is not set")
        run = await cleaner.plan(user_key=user_key)
        touched = {i for p in run.planned for i in op_ids(p.op)}
        run.texts = {i: t for i, t in run.texts.items() if i in touched}  # keep only what shows
        if not run.planned:
            return Proposal(run, None)
        self._purge()
        for plan_id in [k for k, v in self._plans.items() if v.run.user_key == user_key]:
            del self._plans[plan_id]  # a user's new plan replaces their earlier one
        while len(self._plans) >= self.max_pending:
            self._plans.popitem(last=False)
        plan_id = secrets.token_urlsafe(9)
        self._plans[plan_id] = _Pending(run, cleaner, self.clock() + self.ttl_s)
        logger.info(
            "cleanup plan %s pending: user=%s operations=%d", plan_id, user_key, len(run.planned)
        )
        return Proposal(run, plan_id)

    async def apply(self, *, plan_id: str, user_key: str) -> CleanupRun:
        """Apply the pending plan as one change; the run's ``before``/``after`` are the counts
        just before and after it, ``applied.change_id`` the change. ``PlanNotPending`` (with
        nothing changed) when the plan is gone, someone else's, or the memories changed."""
        pending = self._take(plan_id, user_key)
        run = pending.run
        run.before = await self.store.count(user_key=user_key)
        try:
            await pending.cleaner.apply(run)
        except (MemoryNotFound, StoreError) as exc:
            logger.info(
                "cleanup plan %s outdated: user=%s error=%s", plan_id, user_key, type(exc).__name__
            )
            raise PlanNotPending(CHANGED, reason="changed") from None
        assert run.applied is not None
        logger.info(
            "cleanup plan %s applied: user=%s change=%s %d -> %s memories",
            plan_id,
            user_key,
            run.applied.change_id,
            run.before,
            run.after,
        )
        return run

    def cancel(self, *, plan_id: str, user_key: str) -> None:
        """Discard the plan; ``PlanNotPending`` if it is someone else's (a plan already gone
        is fine: nothing was changed either way)."""
        try:
            self._take(plan_id, user_key)
        except PlanNotPending as exc:
            if exc.reason != "gone":
                raise

    def discard(self, plan_id: str) -> None:
        """Forget the plan, whoever owns it (its buttons went away)."""
        self._plans.pop(plan_id, None)

    async def undo(self, *, user_key: str, change_id: str) -> int:
        """Undo the user's change; the memories restored. ``StoreError`` when the change is
        not this user's, already undone, or a later change builds on it."""
        restored = await self.store.undo_change(user_key=user_key, change_id=change_id)
        logger.info("cleanup change %s undone: user=%s restored=%d", change_id, user_key, restored)
        return restored

    def _take(self, plan_id: str, user_key: str) -> _Pending:
        self._purge()
        pending = self._plans.get(plan_id)
        if pending is None:
            raise PlanNotPending(GONE, reason="gone")
        if pending.run.user_key != user_key:
            logger.info("cleanup plan %s refused: user=%s is not its owner", plan_id, user_key)
            raise PlanNotPending(NOT_YOURS, reason="not_yours")
        del self._plans[plan_id]
        return pending

    def _purge(self) -> None:
        now = self.clock()
        for plan_id in [k for k, v in self._plans.items() if v.expires_at <= now]:
            del self._plans[plan_id]


def plan_header(run: CleanupRun) -> str:
    """``Cleanup plan for your 15 memories: 2 operations.`` and what the marks mean."""
    n = len(run.planned)
    header = f"Cleanup plan for your {run.before} memories: {n} operation{'' if n == 1 else 's'}."
    if any(p.user_added for p in run.planned):
        header += (
            f" {USER_ADDED_MARK} marks an operation on memories you added yourself with /remember."
        )
    if run.rejected_batches:
        header += (
            f" {run.rejected_batches} of {len(run.batches)} batches were skipped "
            "(Claude's plan for them was malformed or broke a rule)."
        )
    return header


def operation_lines(
    run: CleanupRun, *, escape: Callable[[str], str] = str, max_chars: int = 400
) -> list[str]:
    """One line per planned operation (:meth:`core.memory.cleanup.PlannedOp.describe`), cut at
    ``max_chars`` before ``escape`` (a cut line ends with "…"); the line of an operation that
    touches /remember memories starts with :data:`USER_ADDED_MARK`."""
    lines = []
    for planned in run.planned:
        line = planned.describe(run.texts)
        if len(line) > max_chars:
            line = line[: max_chars - 1] + "…"
        mark = f"{USER_ADDED_MARK} " if planned.user_added else ""
        lines.append(mark + escape(line))
    return lines


def fit_lines(lines: Sequence[str], *, budget: int) -> tuple[list[str], int]:
    """The first ``lines`` that fit in ``budget`` characters joined by newlines, and how many
    were left out."""
    shown: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if shown else 0)
        if used + cost > budget:
            break
        shown.append(line)
        used += cost
    return shown, len(lines) - len(shown)


def plan_footer(expires_in_s: float) -> str:
    """What the buttons do, and when the plan expires."""
    return (
        "Apply makes all of it one change that you can undo; Cancel discards the plan. "
        f"The plan expires in {round(expires_in_s / 60)} minutes."
    )


def more_line(left_out: int, total: int) -> str:
    """What stands for the operations a message had no room for."""
    return f"… and {left_out} more. Apply applies all {total} operations."


def applied_text(run: CleanupRun) -> str:
    """The answer to Apply: counts, change id, and how to undo it."""
    assert run.applied is not None
    change = run.applied.change_id
    return (
        f"Cleaned up: {run.before} → {run.after} memories, as change `{change}`. "
        "Undo restores them exactly: press Undo, or ask the bot's operator to run "
        f"`selfmind memories undo --user {run.user_key} {change}`."
    )


def undone_text(restored: int) -> str:
    """The answer to Undo."""
    return f"Undone: {restored} memories restored as they were before the cleanup."
