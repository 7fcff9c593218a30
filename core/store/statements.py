"""Statements both backends run as they are, written once: SQL text with ``?`` placeholders
and its parameters, in the order to run them in one transaction. SQLite runs them as they
are; PostgreSQL numbers the placeholders (:func:`core.store.postgres.migrations.numbered`).
Times come in as each backend stores them (``at``): ISO text for SQLite, an aware
``datetime`` for PostgreSQL. The rule (which statements, in which order) is here; the
transaction around them is the backend's."""

from __future__ import annotations

from core.store.writes import REFLECTING_SQL
from core.types import MemoryMode

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
