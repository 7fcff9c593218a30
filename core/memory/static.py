"""Static sentence embeddings for the default recall: numpy only, no torch, fully offline.

The vectors are WordLlama's ``l2_supercat`` token embeddings (256 dimensions, a 32,000-token
Llama 2 vocabulary; Miller 2024, github.com/dleemiller/WordLlama, MIT licence), shipped
inside the ``wordllama`` wheel (``wordllama/weights/l2_supercat_256.safetensors``, 16 MB of
float16, and ``wordllama/tokenizers/l2_supercat_tokenizer_config.json``). A text's vector
is the mean of its tokens' vectors, each weighted by ``log(1 + token id)`` (the vocabulary
is ordered by merge rank, so frequent words such as "the" weigh little: the Zipf weighting
of Model2Vec, Tulkens and van Dongen 2024), L2-normalised.

The files are read straight from the installed package: ``wordllama`` itself is never
imported (importing it configures the root logger, and its loader looks for the tokenizer
under ``tokenizer/`` while the wheel ships it under ``tokenizers/``, then falls back to a
download). Nothing is downloaded, ever. Loading takes about 0.1 s and keeps the float16 table
(16 MB) and the tokenizer; it happens once, lazily, on first use, and sets numpy's BLAS to
one thread in the process (:func:`single_threaded_blas`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from core.errors import ConfigError

logger = logging.getLogger(__name__)

WEIGHTS = "weights/l2_supercat_256.safetensors"
TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
MODEL_NAME = "wordllama-l2-supercat-256-zipf"
"""The tag stored with each vector: a change of model or weighting is a new tag."""
INLINE_TEXTS = 32
"""Up to this many texts are embedded on the event loop (a query: about 50 µs); more go to
a worker thread."""
MAX_CHARS = 2000
"""Texts are cut to this many characters before tokenising."""
INSTALL_HINT = "the default recall needs the wordllama package: pip install -e . (see README)"


def package_dir() -> Path:
    """The installed ``wordllama`` package folder (found without importing it); raises
    ``ConfigError`` when it is missing or lacks the files this module reads."""
    spec = importlib.util.find_spec("wordllama")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        root = Path(location)
        if (root / WEIGHTS).is_file() and (root / TOKENIZER).is_file():
            return root
    raise ConfigError(INSTALL_HINT)


def single_threaded_blas() -> None:
    """Run numpy's BLAS on one thread in this process (threadpoolctl). Recall multiplies a
    user's matrix by the query's vectors on the event loop: 10,000 x 256 by one vector took
    0.9 ms on one thread and 5-20 ms with OpenBLAS's threads competing with the event loop
    on this 2-core machine (measured while loaded)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


class StaticEmbedder:
    """:class:`core.memory.embeddings.Embedder` over WordLlama's static token vectors.

    ``embed(texts)`` returns float32 L2-normalised vectors, shape ``(len(texts), 256)``; a
    text with no tokens gets the zero vector. Raises ``ConfigError`` if the files are missing
    or unreadable."""

    name = MODEL_NAME

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self._table: npt.NDArray[np.float16] | None = None
        self._weights: npt.NDArray[np.float32] | None = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return int(self._loaded()[0].shape[1])

    def _loaded(self) -> tuple[npt.NDArray[np.float16], npt.NDArray[np.float32], Any]:
        with self._lock:
            if self._table is None:
                root = self.root or package_dir()
                try:
                    from safetensors.numpy import load_file
                    from tokenizers import Tokenizer

                    table = load_file(str(root / WEIGHTS))["embedding.weight"]
                    tokenizer = Tokenizer.from_file(str(root / TOKENIZER))
                except Exception as exc:  # safetensors and tokenizers raise their own errors
                    raise ConfigError(f"cannot load static embeddings from {root}: {exc}") from exc
                tokenizer.no_padding()
                tokenizer.no_truncation()
                single_threaded_blas()
                self._weights = np.log1p(np.arange(table.shape[0], dtype=np.float32))
                self._tokenizer = tokenizer
                self._table = np.ascontiguousarray(table, dtype=np.float16)
                logger.info("static embeddings loaded: %d tokens x %d", *table.shape)
            assert self._weights is not None
            return self._table, self._weights, self._tokenizer

    def embed_now(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """:meth:`embed`, on the calling thread."""
        table, weights, tokenizer = self._loaded()
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        if not texts:
            return out
        cut = [t[:MAX_CHARS] for t in texts]
        if len(cut) <= INLINE_TEXTS:
            # One by one on this thread: encode_batch hands a few short texts to the
            # tokenizer's thread pool and gives up the GIL, about 36 against 21 us for a query
            # and its expansions (and more while another thread wants the GIL). Same ids.
            encodings = [tokenizer.encode(t, add_special_tokens=False) for t in cut]
        else:
            encodings = tokenizer.encode_batch(cut, add_special_tokens=False)
        for row, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids, dtype=np.int64)
            if not len(ids):
                continue
            ids = ids[ids < table.shape[0]]
            w = weights[ids]
            out[row] = w @ table[ids].astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.where(norms > 0, norms, 1.0)
        return out

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts``: inline when few (a recall query), else on a worker thread."""
        if len(texts) <= INLINE_TEXTS and self._table is not None:
            return self.embed_now(texts)
        return await asyncio.to_thread(self.embed_now, list(texts))
