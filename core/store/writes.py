"""Write rules both backends share (each keeps only its SQL)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Literal

from core.rules.secrets import redact_secrets
from core.types import AddResult, NewMemory, ReflectionState


def redacted(text: str) -> str | None:
    """An answered chat message as it stays stored: ``text`` with each secret replaced by its
    marker (``[redacted: aws key]``, :func:`core.rules.secrets.redact_secrets`), or None when
    it holds none (nothing to rewrite). The message went to Claude for its answer; the secret
    need not stay in the database for ``history_retention_days``."""
    clean = redact_secrets(text)
    return None if clean == text else clean


def bulk_results(
    norms: Sequence[tuple[str, str]], ids: Mapping[tuple[str, str], int], fresh: Collection[int]
) -> list[AddResult]:
    """The results of a bulk add without dedupe, one per memory in order.

    ``norms`` are the memories' normalised texts and reach tokens, ``ids`` the active memory
    id each has after the insert (exact duplicates were skipped by the unique index),
    ``fresh`` the ids this insert created. A memory is ``added`` when its id is fresh and no
    earlier memory of the batch took it; else ``duplicate`` (of an older memory, or of an
    earlier line of the same batch).
    """
    results: list[AddResult] = []
    seen: set[int] = set()
    for norm in norms:
        memory_id = ids[norm]
        status: Literal["added", "duplicate"] = (
            "added" if memory_id in fresh and memory_id not in seen else "duplicate"
        )
        seen.add(memory_id)
        results.append(AddResult(id=memory_id, status=status))
    return results


def confirmed(memories: Sequence[NewMemory], results: Sequence[AddResult]) -> list[int]:
    """The stored memories a write of ``memories`` (giving ``results``) confirmed, one id per
    confirmation (:class:`core.store.seams.RecallLog`).

    A confirmation is a result dedupe answered with a memory stored before this write; a
    duplicate of a memory this same write added confirms nothing (one message said it
    once), nor does an import (a store re-imported restates, it does not confirm)."""
    added = {r.id for r in results if r.status == "added"}
    return [
        r.id
        for m, r in zip(memories, results, strict=True)
        if r.status == "duplicate" and r.id not in added and m.source != "import"
    ]


REFLECTING: tuple[ReflectionState, ...] = ("answering", "pending")
"""The states of a turn still waiting for its reflection: the only ones a reflection may
write from or move on (:func:`still_reflecting`; the backends' ``end_reflection`` updates a
turn only ``WHERE reflection IN`` these, so a retry's note never revives an ``off``)."""
REFLECTING_SQL = "(" + ", ".join(f"'{state}'" for state in REFLECTING) + ")"
""":data:`REFLECTING` as an SQL list, for ``reflection IN {REFLECTING_SQL}``."""


QUEUED_SQL = "('pending')"
"""The state of a turn whose reflection may run: its answer was delivered (``finish_turn``
with ``reflect``). A turn still ``answering`` waits for its answer first: it is reflected
only once that answer is delivered, and never when it fails (then it becomes ``off``), so
``turns_to_reflect`` reads ``reflection IN {QUEUED_SQL}``, never :data:`REFLECTING_SQL`."""


def recovery_key(turn_id: int) -> str:
    """The event key that claims the start-up recovery of turn ``turn_id`` (one process
    answers a message a crash left unanswered: ``ClaimStore.claim_recovery``)."""
    return f"recover:{turn_id}"


def still_reflecting(state: ReflectionState | None) -> bool:
    """Whether a reflection that just ran may write what it learned from a turn whose
    reflection now reads ``state`` (None: the turn is gone, forgotten meanwhile): only while
    it waits for it (:data:`REFLECTING`). ``off`` means the user's memory was paused or
    turned off since (:meth:`core.store.seams.ModeStore.set_mode`); ``done`` or ``skipped``,
    another reflection of it finished first. Read in the transaction that writes
    (:meth:`core.store.seams.ReflectionQueue.finish_reflection`): a change of mode commits
    before it (and is seen) or waits for it; a forget of everything deletes the turn before
    it erases the memories, so a reflection committing in between finds the turn gone."""
    return state in REFLECTING
