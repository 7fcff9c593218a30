"""Statements both backends run as they are, written once: SQL text with ``?`` placeholders
and its parameters, in the order to run them in one transaction. SQLite runs them as they
are; PostgreSQL numbers the placeholders (:func:`core.store.postgres.migrations.numbered`).
Times come in as each backend stores them (``at``): ISO text for SQLite, an aware
``datetime`` for PostgreSQL. The rule (which statements, in which order) is here; the
transaction around them is the backend's."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from core.store.writes import REFLECTING_SQL
from core.types import MemoryMode, ReflectionState, UsageRecord, utcnow

Statement = tuple[str, tuple[object, ...]]
"""SQL text with ``?`` placeholders and its parameters."""


def mode_change(user_key: str, mode: MemoryMode, *, at: object) -> list[Statement]:
    """The statements, with their parameters, that set ``user_key``'s memory mode, to run in
    order in one transaction (``?`` placeholders; ``at``: now, as the backend stores a
    time). ``on`` is the default, kept as no row. Any other mode is stored and stops
    learning from the user's turns not reflected on yet (``answering`` or ``pending``) in
    the same transaction, so the reflection of a turn in between needs no second read of the
    mode."""
    if mode == "on":
        return [("DELETE FROM memory_modes WHERE user_key = ?", (user_key,))]
    return [
        (
            "INSERT INTO memory_modes(user_key, mode, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (user_key) DO UPDATE SET mode = excluded.mode,"
            " updated_at = excluded.updated_at",
            (user_key, mode, at),
        ),
        (
            f"UPDATE turns SET reflection = 'off' WHERE user_key = ? AND reflection IN"
            f" {REFLECTING_SQL}",
            (user_key,),
        ),
    ]


def put_pending(
    *,
    token: str,
    user_key: str,
    kind: str,
    payload: str,
    expires_at: object,
    now: object,
    replace: bool,
) -> list[Statement]:
    """The statements of :meth:`core.store.seams.PlanStore.put_pending`: expired actions go
    first (every write sweeps them), then with ``replace`` the user's pending action of the
    same ``kind``, then the new one."""
    statements: list[Statement] = [("DELETE FROM pending_actions WHERE expires_at <= ?", (now,))]
    if replace:
        statements.append(
            ("DELETE FROM pending_actions WHERE user_key = ? AND kind = ?", (user_key, kind))
        )
    statements.append(
        (
            "INSERT INTO pending_actions(token, user_key, kind, payload, expires_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (token, user_key, kind, payload, expires_at),
        )
    )
    return statements


def reflection_end(
    turn_id: int, state: ReflectionState | None, attempts: int | None
) -> list[Statement]:
    """The turn's side of a reflection's end (its usage: :data:`USAGE_INSERT`): unless
    ``state`` is None, the turn's reflection state (and ``attempts``, when given), only while
    the turn still waits for its reflection (``REFLECTING``): a turn turned ``off`` by a
    pause, or finished, stays as it is. With ``state`` None, ``attempts`` (when given) is
    only noted, never lowered: the usage of that attempt is in."""
    if state is None:
        if attempts is None:
            return []
        return [
            (
                "UPDATE turns SET attempts = ? WHERE id = ? AND attempts < ?",
                (attempts, turn_id, attempts),
            )
        ]
    return [
        (
            "UPDATE turns SET reflection = ?, attempts = coalesce(?, attempts)"
            f" WHERE id = ? AND reflection IN {REFLECTING_SQL}",
            (state, attempts, turn_id),
        )
    ]


USAGE_INSERT = (
    "INSERT INTO usage(at, user_key, workspace, kind, model, input_tokens,"
    " output_tokens, cache_read_input_tokens, cache_creation_input_tokens, turn_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One Claude call's usage row (parameters: :func:`usage_params`)."""


def usage_params(usage: UsageRecord, *, time: Callable[[datetime], object]) -> tuple[object, ...]:
    """:data:`USAGE_INSERT`'s parameters for ``usage`` (at now when it has no time; ``time``
    turns a time into the backend's form)."""
    return (
        time(usage.at or utcnow()),
        usage.user_key,
        usage.workspace,
        usage.kind,
        usage.model,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
        usage.turn_id,
    )
