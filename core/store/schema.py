"""The upgrade rule both backends share: which numbered migrations a store still needs, and
whether this SelfMind may open it.

A store's ``schema_migrations`` table names the migrations applied to it; a backend's
``MIGRATIONS`` list names the ones this version knows. Then, for any lists (numbers may
have gaps, and branches add migrations in any order):

- a store holding a migration this version does not know was written by a **newer**
  SelfMind: every command refuses it (:class:`NewerSchemaError`), changing nothing;
- a store missing migrations this version knows is **behind**: only ``selfmind db migrate``
  and the bots' start apply them (``apply=True``); any other command refuses it
  (:class:`SchemaBehindError`), changing nothing;
- a **fresh** store (no migration applied: a new file or an empty database) is created by
  any command that may create a store.

The check reads only; a backend runs it before it writes anything, then applies
:attr:`SchemaState.pending` in order when allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import NewerSchemaError, SchemaBehindError


@dataclass(frozen=True)
class SchemaState:
    """The migrations a store holds (``applied``) against the ones this version knows
    (``known``), each as ``(number, name)`` sorted by number."""

    applied: tuple[tuple[int, str], ...]
    known: tuple[tuple[int, str], ...]

    @classmethod
    def of(
        cls, applied: Iterable[tuple[int, str]], known: Iterable[tuple[int, str]]
    ) -> SchemaState:
        return cls(tuple(sorted(applied)), tuple(sorted(known)))

    @property
    def fresh(self) -> bool:
        """No migration applied yet: a new store."""
        return not self.applied

    @property
    def pending(self) -> tuple[tuple[int, str], ...]:
        """Known migrations the store does not hold, in order."""
        have = {number for number, _ in self.applied}
        return tuple(m for m in self.known if m[0] not in have)

    @property
    def unknown(self) -> tuple[tuple[int, str], ...]:
        """Applied migrations this version does not know (written by a newer SelfMind)."""
        know = {number for number, _ in self.known}
        return tuple(m for m in self.applied if m[0] not in know)

    def describe(self) -> str:
        """One phrase for ``selfmind doctor``: up to date, behind, newer or fresh."""
        if self.unknown:
            return f"written by a newer SelfMind ({_newest(self.unknown)})"
        if self.fresh:
            return "new (no schema yet)"
        if self.pending:
            return f"behind: {len(self.pending)} migrations to apply ({_names(self.pending)})"
        return f"up to date ({_newest(self.applied)})"


def check_schema(state: SchemaState, *, where: str, apply: bool) -> None:
    """Raise when this version may not open the store at ``where`` as it is.

    ``NewerSchemaError`` when it holds an unknown migration (whatever ``apply``);
    ``SchemaBehindError`` when it is behind and not ``apply``. A fresh store passes."""
    if state.unknown:
        raise NewerSchemaError(
            f"{where} was written by a newer SelfMind (schema {_newest(state.unknown)}) than"
            f" this one (selfmind {app_version()}, schema {_newest(state.known)}): install"
            " the newer version, or restore the backup taken before it upgraded the store"
        )
    if state.pending and not state.fresh and not apply:
        raise SchemaBehindError(
            f"{where} needs `selfmind db migrate` ({len(state.pending)} migrations to apply:"
            f" {_names(state.pending)}); nothing was changed"
        )


def app_version() -> str:
    """This installation's version (package metadata), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("selfmind")
    except PackageNotFoundError:
        return "unknown"


def _newest(migrations: tuple[tuple[int, str], ...]) -> str:
    number, name = max(migrations) if migrations else (0, "none")
    return f"{number}, {name}"


def _names(migrations: tuple[tuple[int, str], ...]) -> str:
    return ", ".join(name for _, name in migrations)
