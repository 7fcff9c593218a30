"""Reviewing a memory cleanup in a chat: the caller sees a plan, then applies or cancels it.

``/memories cleanup`` (Slack and Discord) asks :class:`CleanupReviews` for a plan
(:meth:`core.memory.cleanup.Cleaner.plan`; nothing is changed) and shows it only to the caller,
with Apply and Cancel buttons. The plan waits in the store (``pending_actions``, shared by
every replica on the database) under a random plan id:

- only its owner (the same memory key) may apply or cancel it; for anyone else
  ``PlanNotPending`` says so and nothing changes;
- it expires after ``ttl_s`` (15 minutes); a user's new plan replaces their earlier one; it
  survives a restart and can be applied through any replica;
- one click takes it (atomically, in the store): a double, replayed or concurrent click on
  another replica finds it gone. The Undo button carries a single-use token the same way;
- Apply applies exactly the plan shown, as one change (``store.apply_change``) that
  ``store.undo_change`` reverses. When the memories changed since (a planned memory was
  forgotten or cleaned up meanwhile) the store refuses the whole change: ``PlanNotPending``,
  nothing changed.

Planning costs Claude calls (at most ``cleanup_max_batches``), so the user's daily token cap
(:mod:`core.chat.controls`) is checked first. Adapters format the plan for their platform with
:func:`operation_lines`, :func:`fit_lines` and the sentences below, which both platforms share.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Protocol

from core.errors import ConfigError, LimitReached, MemoryNotFound, PlanNotPending, StoreError
from core.memory.cleanup import Cleaner, CleanupRun, PlannedOp
from core.memory.service import is_token, new_token
from core.rules.cleanup_ops import UNDO_WINDOW, ChangeOp, MergeOp, RetireOp, SupersedeOp, op_ids
from core.store.seams import CleanupStore, MemoryStore, PlanStore
from core.types import utcnow

logger = logging.getLogger(__name__)


class LimitCheck(Protocol):
    """The daily caps a plan counts against (:class:`core.chat.controls.Controls` is one)."""

    async def check_limits(self, *, user_key: str, workspace: str | None) -> None:
        """Raise ``LimitReached`` when the user or workspace has used up today's cap."""


PLAN_TTL_S = 15 * 60.0
"""A plan shown in a chat can be applied for this long."""
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
NOT_YOURS_UNDO = "This Undo belongs to someone else; nothing was changed."
UNDO_GONE = "This Undo was already used (or its change is past the undo window); nothing changed."
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


PLAN_KIND = "cleanup_plan"
"""The ``kind`` of a pending plan in the store (:class:`core.store.seams.PlanStore`)."""
UNDO_KIND = "cleanup_undo"
"""The ``kind`` of an Undo button's single-use token."""


class ReviewStore(MemoryStore, CleanupStore, PlanStore, Protocol):
    """What plan review uses of the store: memory counts, cleanup changes, pending plans."""


class CleanupReviews:
    """Plans shown in chats, waiting for their owner's Apply or Cancel.

    Plans live in the store (:class:`core.store.seams.PlanStore`), so Apply works on any
    replica over the same database, and each is taken by one click only (a replayed or
    double click finds it gone). ``clock`` gives aware UTC now (tests move it to expire plans).
    """

    def __init__(
        self,
        *,
        store: ReviewStore,
        cleaner: Cleaner | None,
        controls: LimitCheck | None = None,
        ttl_s: float = PLAN_TTL_S,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.cleaner = cleaner
        self.controls = controls
        self.ttl_s = ttl_s
        self.clock = clock

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
        pending in the store when it has operations (a user's new plan replaces their
        earlier one). ``ConfigError`` without a model."""
        cleaner = self.cleaner
        if cleaner is None:
            raise ConfigError("ANTHROPIC_API_KEY is not set")
        run = await cleaner.plan(user_key=user_key)
        touched = {i for p in run.planned for i in op_ids(p.op)}
        run.texts = {i: t for i, t in run.texts.items() if i in touched}  # keep only what shows
        if not run.planned:
            return Proposal(run, None)
        plan_id = new_token()
        await self.store.put_pending(
            token=plan_id,
            user_key=user_key,
            kind=PLAN_KIND,
            payload=run_to_json(run),
            expires_at=self.clock() + timedelta(seconds=self.ttl_s),
            replace=True,
        )
        logger.info(
            "cleanup plan %s pending: user=%s operations=%d", plan_id, user_key, len(run.planned)
        )
        return Proposal(run, plan_id)

    async def apply(self, *, plan_id: str, user_key: str) -> CleanupRun:
        """Apply the pending plan as one change; the run's ``before``/``after`` are the counts
        just before and after it, ``applied.change_id`` the change. ``PlanNotPending`` (with
        nothing changed) when the plan is gone, someone else's, or the memories changed."""
        cleaner = self.cleaner
        if cleaner is None:
            raise ConfigError("ANTHROPIC_API_KEY is not set")
        run = run_from_json(await self._take(plan_id, user_key))
        run.before = await self.store.count(user_key=user_key, one_copy=True)  # as listed
        try:
            await cleaner.apply(run)
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

    async def cancel(self, *, plan_id: str, user_key: str) -> None:
        """Discard the plan; ``PlanNotPending`` if it is someone else's (a plan already gone
        is fine: nothing was changed either way)."""
        try:
            await self._take(plan_id, user_key)
        except PlanNotPending as exc:
            if exc.reason != "gone":
                raise

    async def discard(self, plan_id: str) -> None:
        """Forget the plan, whoever owns it (its buttons went away)."""
        await self.store.drop_pending(token=plan_id)

    async def undo_token(self, *, user_key: str, change_id: str) -> str:
        """A single-use token for the Undo button of the user's applied ``change_id`` (valid
        for the 7-day undo window, :data:`core.rules.cleanup_ops.UNDO_WINDOW`)."""
        token = new_token()
        await self.store.put_pending(
            token=token,
            user_key=user_key,
            kind=UNDO_KIND,
            payload=change_id,
            expires_at=self.clock() + UNDO_WINDOW,
        )
        return token

    async def undo(self, *, user_key: str, token: str) -> int:
        """Undo the change an Undo button's ``token`` names, once; the memories restored.
        ``PlanNotPending`` when the token is gone (used, expired) or someone else's;
        ``StoreError`` when the change is not this user's, already undone, or a later change
        builds on it."""
        change_id = None
        if is_token(token):
            change_id = await self.store.take_pending(
                token=token, user_key=user_key, kind=UNDO_KIND, now=self.clock()
            )
        if change_id is None:
            if is_token(token) and await self.store.pending_owner(
                token=token, kind=UNDO_KIND, now=self.clock()
            ):
                raise PlanNotPending(NOT_YOURS_UNDO, reason="not_yours")
            raise PlanNotPending(UNDO_GONE, reason="gone")
        restored = await self.store.undo_change(user_key=user_key, change_id=change_id)
        logger.info("cleanup change %s undone: user=%s restored=%d", change_id, user_key, restored)
        return restored

    async def _take(self, plan_id: str, user_key: str) -> str:
        if not is_token(plan_id):
            raise PlanNotPending(GONE, reason="gone")
        payload = await self.store.take_pending(
            token=plan_id, user_key=user_key, kind=PLAN_KIND, now=self.clock()
        )
        if payload is not None:
            return payload
        if await self.store.pending_owner(token=plan_id, kind=PLAN_KIND, now=self.clock()):
            logger.info("cleanup plan %s refused: user=%s is not its owner", plan_id, user_key)
            raise PlanNotPending(NOT_YOURS, reason="not_yours")
        raise PlanNotPending(GONE, reason="gone")


def run_to_json(run: CleanupRun) -> str:
    """A pending plan as JSON: its owner, operations and the texts shown (usage is recorded
    when planned, so not kept). Read back by :func:`run_from_json`."""
    return json.dumps(
        {
            "user_key": run.user_key,
            "before": run.before,
            "batches": run.batches,
            "rejected_batches": run.rejected_batches,
            "texts": {str(i): t for i, t in run.texts.items()},
            "planned": [
                {"op": _op_to_dict(p.op), "reason": p.reason, "user_added": list(p.user_added)}
                for p in run.planned
            ],
        },
        ensure_ascii=False,
    )


def run_from_json(payload: str) -> CleanupRun:
    """The plan :func:`run_to_json` wrote."""
    data: dict[str, Any] = json.loads(payload)
    return CleanupRun(
        user_key=str(data["user_key"]),
        before=int(data["before"]),
        batches=[int(b) for b in data["batches"]],
        rejected_batches=int(data["rejected_batches"]),
        texts={int(i): str(t) for i, t in data["texts"].items()},
        planned=[
            PlannedOp(
                op=_op_from_dict(p["op"]),
                reason=str(p["reason"]),
                user_added=tuple(int(i) for i in p["user_added"]),
            )
            for p in data["planned"]
        ],
    )


def _op_to_dict(op: ChangeOp) -> dict[str, Any]:
    if isinstance(op, MergeOp):
        return {
            "merge": list(op.ids),
            "text": op.text,
            "kind": op.kind,
            "category": op.category,
        } | ({"days": [d.isoformat() if d else None for d in op.days]} if op.days else {})
    if isinstance(op, SupersedeOp):
        return {"supersede": op.old_id, "by": op.new_id}
    return {"retire": op.memory_id}


def _op_from_dict(data: dict[str, Any]) -> ChangeOp:
    if "merge" in data:
        return MergeOp(
            ids=tuple(int(i) for i in data["merge"]),
            text=str(data["text"]),
            kind=data["kind"],
            category=data["category"],
            days=_days(data["days"]) if data.get("days") else None,
        )
    if "supersede" in data:
        return SupersedeOp(old_id=int(data["supersede"]), new_id=int(data["by"]))
    return RetireOp(memory_id=int(data["retire"]))


def _days(data: list[str | None]) -> tuple[date | None, date | None]:
    """A dated merge's ``(valid_from, valid_until)`` from its stored ISO days."""
    first, last = (date.fromisoformat(d) if d else None for d in data)
    return first, last


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
