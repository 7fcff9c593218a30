"""Embedding speed and agreement: float32 against bfloat16 autocast, in the same run.

    python bench/embed_precision.py [--texts 1000] [--queries 50]

Embeds ``--texts`` memory-like sentences in batches (what a reindex or a bulk import does)
and ``--queries`` one at a time (what each recall does), both ways, on the bot's model
(core/memory/embeddings.py), and prints the time of each and the worst and mean cosine of a
bfloat16 vector to its float32 one. The embedder uses bfloat16 only when its load-time probes
keep every cosine >= ``MIN_COSINE`` and encode a batch at least ``MIN_SPEEDUP`` times faster;
this bench says which it chose on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.memory.embeddings import MIN_COSINE, SentenceTransformerEmbedder, encode

SUBJECTS = ["likes", "works on", "lives near", "is learning", "dislikes", "plays"]
THINGS = ["green tea", "the billing migration", "Lisbon", "Rust", "long meetings", "chess"]


def texts(n: int) -> list[str]:
    return [
        f"The user {SUBJECTS[i % 6]} {THINGS[(i * 5) % 6]} since {2010 + i % 15}, item {i}."
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    embedder = SentenceTransformerEmbedder()
    model = embedder._load()
    batch, queries = texts(args.texts), texts(args.queries)
    encode(model, batch[:64], bf16=False)
    encode(model, batch[:64], bf16=True)
    rows = []
    vectors = {}
    for bf16 in (False, True):
        t0 = time.perf_counter()
        vectors[bf16] = encode(model, batch, bf16=bf16)
        batch_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for q in queries:
            encode(model, [q], bf16=bf16)
        query_ms = (time.perf_counter() - t0) * 1000 / len(queries)
        rows.append(("bfloat16" if bf16 else "float32", batch_s, query_ms))
    cos = (vectors[False] * vectors[True]).sum(axis=1)
    print(f"{'precision':<10}{f'{args.texts} texts s':>16}{'one query ms':>14}")
    for name, batch_s, query_ms in rows:
        print(f"{name:<10}{batch_s:>16.2f}{query_ms:>14.1f}")
    print(
        f"speed-up {rows[0][1] / rows[1][1]:.1f}x (batches), {rows[0][2] / rows[1][2]:.1f}x "
        f"(one query); cosine to float32 worst {cos.min():.6f} mean {cos.mean():.6f} "
        f"(bound {MIN_COSINE}); the embedder chose {'bfloat16' if embedder.bf16 else 'float32'}"
    )


if __name__ == "__main__":
    main()
