"""Secrets stored before the secret check guarded every path in
(:func:`core.rules.secrets.find_secrets`): the rule behind SQLite migration
``m014_redact_secrets`` and PostgreSQL ``m012_redact_secrets``. One algorithm; each backend
passes its SQL runner (``?`` placeholders).

What a row holding a secret becomes:

- a memory (active, superseded or retired): erased as ``forget`` erases one, its row and
  embedding deleted, a ``forgotten`` event left, events pointing at it unpointed. A memory
  is one sentence: one that carries a secret is the secret, so it is removed, not rewritten
  (a stored "The user's staging password is [redacted: password]." would tell nothing);
- a chat message (a turn): the secret replaced by its marker (``[redacted: aws key]``), as
  an answered message is from now on (:func:`core.store.writes.redacted`);
- a pending cleanup plan or confirmation whose payload carries one: deleted (its buttons
  then say the plan is gone).

Rows are read in id order, ``BATCH_ROWS`` at a time, and checked in Python: one linear scan.
The counts are logged at INFO and returned; without ``execute`` the same scan only counts
(:data:`REDACT_SECRETS`: ``db migrate`` says what it will erase before it runs, and after).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from core.rules.secrets import has_secret
from core.store.effects import Also, Change, Effect, Execute, Fetch
from core.store.text_repair import BATCH_ROWS
from core.store.writes import redacted

logger = logging.getLogger(__name__)


async def redact_stored_secrets(
    *,
    fetch: Fetch,
    execute: Execute | None,
    now: object = None,
    erased: Callable[[set[int]], Awaitable[None]] | None = None,
) -> Change:
    """Erase every memory, redact every turn and delete every pending action holding a secret.

    ``now`` is the backend's timestamp value for the events; ``erased(uids)`` runs after the
    memories of those users were deleted (SQLite rewrites their FTS5 indexes there). Returns
    the memories erased (of how many users), the messages redacted and the pending actions
    deleted; without ``execute`` only counts them. Runs inside the caller's transaction;
    database errors propagate.
    """
    if execute is None:
        execute = _nothing
        erased = None
    hits: list[tuple[int, int]] = []
    last = 0
    while rows := await fetch(
        "SELECT id, uid, text FROM memories WHERE id > ? ORDER BY id LIMIT ?", (last, BATCH_ROWS)
    ):
        last = int(rows[-1][0])
        hits += [(int(uid), int(mid)) for mid, uid, text in rows if has_secret(text)]
    for uid, memory_id in hits:
        await execute(
            "INSERT INTO memory_events(uid, memory_id, event, at) VALUES (?, ?, 'forgotten', ?)",
            (uid, memory_id, now),
        )
        await execute(
            "UPDATE memory_events SET related_id = NULL WHERE uid = ? AND related_id = ?",
            (uid, memory_id),
        )
        await execute("DELETE FROM memories WHERE id = ?", (memory_id,))
    users = {uid for uid, _ in hits}
    if users and erased is not None:
        await erased(users)
    turns = 0
    last = 0
    while rows := await fetch(
        "SELECT id, text FROM turns WHERE id > ? ORDER BY id LIMIT ?", (last, BATCH_ROWS)
    ):
        last = int(rows[-1][0])
        for turn_id, text in rows:
            clean = redacted(text)
            if clean is not None:
                turns += 1
                await execute("UPDATE turns SET text = ? WHERE id = ?", (clean, turn_id))
    pending = 0
    for token, payload in await fetch("SELECT token, payload FROM pending_actions", ()):
        if has_secret(payload):
            pending += 1
            await execute("DELETE FROM pending_actions WHERE token = ?", (token,))
    if execute is not _nothing:
        logger.info(
            "secrets removed from the store: %d memories erased (%d users), %d messages"
            " redacted, %d pending actions deleted",
            len(hits),
            len(users),
            turns,
            pending,
        )
    return Change(
        len(hits),
        len(users),
        (
            Also(turns, "chat message", "chat messages", "redacted"),
            Also(pending, "pending plan", "pending plans", "deleted"),
        ),
    )


async def _nothing(sql: str, args: Sequence[Any]) -> None:
    """An ``execute`` that changes nothing: the scan only counts."""


async def _count_secrets(fetch: Fetch) -> Change:
    return await redact_stored_secrets(fetch=fetch, execute=None)


REDACT_SECRETS = Effect(
    verb="erase",
    done="erased",
    why="memories holding a secret (a password, key or token) stored before the secret check"
    " are erased as /forget erases one; secrets in stored chat messages are redacted",
    count=_count_secrets,
)
"""SQLite ``m014_redact_secrets``, PostgreSQL ``m012_redact_secrets``."""

REDACT_SECRET_FORMS = Effect(
    verb="erase",
    done="erased",
    why="memories holding a secret the check learned later (a card number, IBAN, SSN, 2FA"
    " backup codes or seed, a password without a colon) are erased as /forget erases one;"
    " such secrets in stored chat messages are redacted",
    count=_count_secrets,
)
"""SQLite ``m020_redact_secret_forms``, PostgreSQL ``m017_redact_secret_forms``: the same
repair with the check of issue 36."""
