"""What a migration does to stored memories, said before it runs and after it ran.

A migration that changes or removes stored memories declares an :class:`Effect` on its
step of the one list (``effect=`` in :data:`core.store.migrations.STEPS`, once for both
backends; each runner looks it up by its migration's name there): what it does to them
(``erase``), why, and a read-only ``count`` of what it will change (how many memories, of
how many users, and what else). A step that changes no memory says why in ``unchanged=``
instead, when a test could take it for one that does (Python, or SQL writing
``memories``; tests/core/store/test_migration_effects.py holds every step to one of the
two).

Both backends' migration runners call :func:`before` and :func:`after` around each
migration, in its transaction:

- before it runs: ``m014_redact_secrets will erase 3 memories of 2 users (and 1 chat
  message redacted): memories holding a secret (...) stored before the secret check``;
- after it ran: ``applied m014_redact_secrets: erased 3 memories of 2 users (and 1 chat
  message redacted)``. What it did is what the migration returns when it returns a
  :class:`Change` (it counts as it goes), otherwise the count before minus a count after.

The lines go to the runner's ``notify`` (``selfmind db migrate`` prints them) or, without
one (the bots' start), to the log at WARNING, so they show at the default level. They hold
counts only, never a memory's text.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

Fetch = Callable[[str, Sequence[Any]], Awaitable[Sequence[Sequence[Any]]]]
"""``(sql, args) -> rows``; the SQL uses ``?`` placeholders."""
Execute = Callable[[str, Sequence[Any]], Awaitable[object]]
"""``(sql, args)``; the SQL uses ``?`` placeholders."""
Notify = Callable[[str], None]
"""Where a migration runner says what it does: one line at a time."""


@dataclass(frozen=True)
class Also:
    """Something else a migration changes, counted: ``1 chat message redacted``."""

    count: int
    one: str
    many: str
    how: str

    def phrase(self) -> str:
        return f"{self.count} {self.one if self.count == 1 else self.many} {self.how}"


@dataclass(frozen=True)
class Change:
    """Memories a migration changes (or changed), of how many users, and what else."""

    memories: int
    users: int
    also: tuple[Also, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing at all to change."""
        return not self.memories and not any(a.count for a in self.also)

    def minus(self, other: Change) -> Change:
        """What ``self`` (counted before) has that ``other`` (counted after) has not."""
        left = {(a.one, a.how): a.count for a in other.also}
        return Change(
            max(0, self.memories - other.memories),
            max(0, self.users - other.users),
            tuple(
                Also(max(0, a.count - left.get((a.one, a.how), 0)), a.one, a.many, a.how)
                for a in self.also
            ),
        )


@dataclass(frozen=True)
class Effect:
    """What one migration does to stored memories: ``verb`` and ``done`` (``erase``,
    ``erased``), ``why`` (one phrase), and ``count``: a read-only count of what it will
    change, given the backend's ``fetch`` (``?`` placeholders), run in the migration's
    transaction just before it."""

    verb: str
    done: str
    why: str
    count: Callable[[Fetch], Awaitable[Change]]


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _what(change: Change) -> str:
    memories = _plural(change.memories, "memory", "memories")
    text = f"{memories} of {_plural(change.users, 'user', 'users')}"
    also = [a.phrase() for a in change.also if a.count]
    return text + (f" (and {', '.join(also)})" if also else "")


def will_line(name: str, effect: Effect, change: Change) -> str:
    """The line said before migration ``name`` runs."""
    return f"{name} will {effect.verb} {_what(change)}: {effect.why}"


def did_line(name: str, effect: Effect, did: Change) -> str:
    """The line said once migration ``name`` was applied."""
    return f"applied {name}: {effect.done} {_what(did)}"


class Notes:
    """A migration runner's voice: every line to ``notify`` when given; otherwise the
    lines about memories to the log at WARNING (the plain ``applied NAME`` is logged by
    the caller, :func:`core.runtime.open_store`)."""

    def __init__(self, effects: Mapping[str, Effect], notify: Notify | None) -> None:
        self.effects = effects
        self.notify = notify

    def _say(self, line: str, *, about_memories: bool) -> None:
        if self.notify is not None:
            self.notify(line)
        elif about_memories:
            logger.warning("%s", line)

    async def before(self, name: str, fetch: Fetch) -> Change | None:
        """Count and say what migration ``name`` will change (None, and nothing said, when
        it declares no :class:`Effect` or finds nothing to change). Call inside its
        transaction, before it runs."""
        effect = self.effects.get(name)
        if effect is None:
            return None
        change = await effect.count(fetch)
        if change.empty:
            return None  # nothing to change: the migration is a plain one here
        self._say(will_line(name, effect, change), about_memories=True)
        return change

    async def after(self, name: str, fetch: Fetch, before: Change | None, result: object) -> str:
        """The line for migration ``name`` once it ran (inside its transaction, before the
        commit): what it did, from its own :class:`Change` when it returned one, else
        ``before`` minus a second count. Say it with :meth:`applied` after the commit."""
        effect = self.effects.get(name)
        if effect is None or before is None:
            return f"applied {name}"
        did = result if isinstance(result, Change) else before.minus(await effect.count(fetch))
        return did_line(name, effect, did)

    def applied(self, line: str) -> None:
        """Say ``line`` (from :meth:`after`) once the migration is committed."""
        self._say(line, about_memories=line.startswith("applied ") and ":" in line)
