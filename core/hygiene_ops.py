"""Operations of a memory cleanup change (store-agnostic data)."""

from __future__ import annotations

from dataclasses import dataclass

from core.models import Category, Kind


@dataclass(frozen=True)
class MergeOp:
    """Replace ``ids`` (two or more) by one new memory ``text``."""

    ids: tuple[int, ...]
    text: str
    kind: Kind
    category: Category


@dataclass(frozen=True)
class SupersedeOp:
    """``old_id`` is contradicted by the newer ``new_id``."""

    old_id: int
    new_id: int


@dataclass(frozen=True)
class RetireOp:
    """``memory_id`` breaks the rules of what to keep (transient, one-off)."""

    memory_id: int


ChangeOp = MergeOp | SupersedeOp | RetireOp


@dataclass(frozen=True)
class AppliedChange:
    """What a change did: memories added, superseded and retired (ids)."""

    change_id: str
    added: tuple[int, ...]
    superseded: tuple[int, ...]
    retired: tuple[int, ...]
