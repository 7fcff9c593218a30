"""Shared fixtures: real SQLite files under tmp_path, the memory service over them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.service import MemoryService
from core.sqlite_store import SQLiteStore

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCOMO = REPO_ROOT.parent / "shared" / "data" / "locomo"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteStore]:
    s = await SQLiteStore.open(str(db_path))
    yield s
    await s.close()


@pytest.fixture
def service(store: SQLiteStore) -> MemoryService:
    return MemoryService(store, dedupe_threshold=0.7)


def locomo_or_skip() -> Path:
    """The shared LoCoMo folder, or skip the test when it is absent."""
    if not any(LOCOMO.glob("conv-*.json")):
        pytest.skip(f"LoCoMo data not found at {LOCOMO}")
    return LOCOMO
