"""The upgrade rule both backends share: which numbered migrations a store still needs, and
whether this SelfMind may open it.

A store's ``schema_migrations`` table names the migrations applied to it; the backend's
forms of :data:`core.store.migrations.STEPS` name the ones this version knows. Then, for
any lists (numbers may have gaps, and branches add migrations in any order):

- a store holding a migration this version does not know was written by a **newer**
  SelfMind: every command refuses it (:class:`NewerSchemaError`), changing nothing;
- a store missing migrations this version knows is **behind**: only ``selfmind db migrate``
  and the bots' start apply them (``apply=True``); any other command refuses it
  (:class:`SchemaBehindError`), changing nothing;
- a **fresh** store (no migration applied: a new file or an empty database) is created by
  any command that may create a store.

The check reads only; a backend runs it before it writes anything, then applies
:attr:`SchemaState.pending` in order when allowed.

Versions: :data:`RELEASES` records the newest step each SelfMind version knows, so the
first version that knows a migration (on either backend) is looked up in one place. A backend
writes that version beside each migration it applies (``schema_migrations.selfmind_version``),
so an older SelfMind refusing the store can say which version it needs
(``needs SelfMind >= 0.4.0``), although it has never heard of that migration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core import __version__
from core.errors import NewerSchemaError, SchemaBehindError
from core.store.migrations import STEPS, Backend, step_of


@dataclass(frozen=True)
class Release:
    """A SelfMind version and the newest step of :data:`core.store.migrations.STEPS` it
    knows (by the step's key)."""

    version: str
    newest: str


RELEASES: tuple[Release, ...] = (
    # 0.1.0 never moved while its 16 schema changes landed: every one of them is "0.1.0"
    # (SQLite m001-m016, PostgreSQL m001-m013).
    Release("0.1.0", newest="turn_ids_never_reused"),
    # where each memory was learned, team memory, exactly-once recovery, secret forms,
    # dedupe and consolidation, whose fact and when (SQLite m017-m022, PostgreSQL m014-m019)
    Release("0.2.0", newest="memory_about_dates"),
    # consolidation's usage under its own kind (m023 on both backends)
    Release("0.3.0", newest="usage_kind_consolidation"),
    # one active copy of a sentence per place it may be used in (m024 on both backends)
    Release("0.3.1", newest="active_text_per_reach"),
    # the memories learned outside the DM indexed for counts (m025); what a Discord private
    # channel's threads taught, the thread's own (m026)
    Release("0.3.2", newest="thread_places"),
)
"""Oldest first. A release that adds a step adds a row (and that row's version is
:data:`core.__version__`); a step no row covers fails the tests (:func:`unversioned`)."""


def version_key(version: str) -> tuple[int, ...]:
    """``"0.10.2"`` -> ``(0, 10, 2)``, for ordering versions (non-numbers count as 0)."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _position(key: str) -> int | None:
    return next((i for i, step in enumerate(STEPS) if step.key == key), None)


def first_version_of(key: str) -> str | None:
    """The first SelfMind version that knows the step ``key`` (:data:`RELEASES`), None when
    no release covers it (or no step has that key)."""
    at = _position(key)
    if at is None:
        return None
    for release in RELEASES:
        newest = _position(release.newest)
        if newest is not None and at <= newest:
            return release.version
    return None


def first_version(backend: Backend, number: int) -> str | None:
    """The first SelfMind version that knows migration ``number`` of ``backend`` (its
    number there, as stores record it); None when no release or no step covers it."""
    step = step_of(backend, number)
    return None if step is None else first_version_of(step.key)


def unversioned(keys: Iterable[str]) -> list[str]:
    """The step ``keys`` no release in :data:`RELEASES` covers, in their order."""
    return [key for key in keys if first_version_of(key) is None]


@dataclass(frozen=True)
class SchemaState:
    """The migrations a store holds (``applied``) against the ones this version knows
    (``known``), each as ``(number, name)`` sorted by number."""

    applied: tuple[tuple[int, str], ...]
    known: tuple[tuple[int, str], ...]
    versions: Mapping[int, str] = field(default_factory=dict)
    """The SelfMind version the store recorded beside each applied migration (the first
    that knows it), where it recorded one."""

    @classmethod
    def of(
        cls,
        applied: Iterable[tuple[int, str]],
        known: Iterable[tuple[int, str]],
        versions: Mapping[int, str] | None = None,
    ) -> SchemaState:
        return cls(tuple(sorted(applied)), tuple(sorted(known)), dict(versions or {}))

    @property
    def needs(self) -> str | None:
        """The oldest SelfMind that knows every migration of the store, as the store
        recorded it; None when it recorded none for the migrations this one does not know."""
        recorded = [self.versions[n] for n, _ in self.unknown if self.versions.get(n)]
        return max(recorded, key=version_key) if recorded else None

    def needs_phrase(self) -> str:
        """``needs SelfMind >= 0.4.0`` (or ``needs a SelfMind newer than 0.3.0``)."""
        if self.needs:
            return f"needs SelfMind >= {self.needs}"
        return f"needs a SelfMind newer than {app_version()}"

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
            return f"written by a newer SelfMind ({_newest(self.unknown)}): {self.needs_phrase()}"
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
            f"{where} was written by a newer SelfMind: {state.needs_phrase()} (the store has"
            f" schema {_newest(state.unknown)}; this is selfmind {app_version()}, schema"
            f" {_newest(state.known)}): install that version, or restore the backup taken"
            " before it upgraded the store"
        )
    if state.pending and not state.fresh and not apply:
        raise SchemaBehindError(
            f"{where} needs `selfmind db migrate` ({len(state.pending)} migrations to apply:"
            f" {_names(state.pending)}); nothing was changed"
        )


def app_version() -> str:
    """This SelfMind's version, :data:`core.__version__` (the package's version too)."""
    return __version__


def state_of_rows(
    rows: Iterable[Mapping[str, Any]], known: Iterable[tuple[int, str]]
) -> SchemaState:
    """The state of a store whose ``schema_migrations`` rows (``SELECT *``, as mappings of
    column to value: ``number``, ``name`` and, where recorded, ``selfmind_version``) are
    ``rows``, against the ``known`` migrations."""
    rows = list(rows)
    return SchemaState.of(
        ((int(r["number"]), str(r["name"])) for r in rows),
        known,
        {int(r["number"]): str(r["selfmind_version"]) for r in rows if r.get("selfmind_version")},
    )


def _newest(migrations: tuple[tuple[int, str], ...]) -> str:
    number, name = max(migrations) if migrations else (0, "none")
    return f"{number}, {name}"


def _names(migrations: tuple[tuple[int, str], ...]) -> str:
    return ", ".join(name for _, name in migrations)
