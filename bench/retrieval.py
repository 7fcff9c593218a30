"""Recall quality and speed on the LoCoMo conversations, SelfMind against a reference BM25.

    python bench/retrieval.py [--backend sqlite|postgres] [--database-url URL] [--data DIR]
        [--recall bm25|bm25,hybrid] [--json] [--scale-users 100] [--scale-per-user 10000]

Each conversation's human-checked observations become one user's memories (through the real
store and its dedupe); each question of categories 1-4 with evidence is a query; a hit at k
means one of the top k recalled memories cites an evidence turn. The same run measures the
reference pure-Python Okapi BM25 (:mod:`bench.reference_bm25`) on the same memories.

Quality is measured twice: in a store holding only the benchmark users, and in a store that
also holds ``scale_users * scale_per_user`` synthetic memories (texts sampled from the same
conversations' observations and turns). Latency p50/p95 is for one synthetic user.

The synthetic part of the large store is cached, since building a million memories takes
minutes: for SQLite under ``bench/.cache/schema-N/`` (git-ignored; N: the store's last
migration, :func:`cache_dir`), copied for each run; for PostgreSQL
(``--backend postgres``, server from ``--database-url``, default ``SELFMIND_BENCH_DATABASE_URL``
or ``SELFMIND_TEST_DATABASE_URL``) as a template database named by a hash of its contents,
loaded with ``COPY`` and cloned for each run (:mod:`bench.postgres_bench`). Both backends get
the same synthetic memories.

``--recall bm25,hybrid`` measures hybrid recall (:mod:`core.memory.hybrid`, needs the
semantic extra) in the same run: its Hit@k in both stores, its latency for the same synthetic
user (whose 10,000 memories are embedded first), and the process's peak memory with the model
loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import reference_bm25
from bench.locomo import DEFAULT_DATA, REPO_ROOT, Conversation, load_all
from core.memory.recall import BM25Recaller, Recaller
from core.rules.dedupe import Deduper
from core.store.seams import Store
from core.store.sqlite.base import MIGRATIONS
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory

if TYPE_CHECKING:
    from core.memory.hybrid import HybridRecaller

KS = (1, 6, 10)
CACHE = REPO_ROOT / "bench" / ".cache"
LATENCY_QUERIES = 300
REFERENCE_LATENCY_QUERIES = 60


@dataclass
class UserData:
    conv: Conversation
    user_key: str
    evidence: dict[int, set[str]]  # memory id -> dia ids it cites
    texts: list[str]  # for the reference ranker
    text_evidence: list[frozenset[str]]


def progress(total: int, label: str) -> tuple[object, object]:
    """A rich progress bar on a terminal, else nothing."""
    if not sys.stderr.isatty():
        return None, None
    from rich.progress import Progress

    bar = Progress(transient=True)
    bar.start()
    return bar, bar.add_task(label, total=total)


async def load_users(store: Store, convs: Sequence[Conversation]) -> list[UserData]:
    users = []
    dedupe = Deduper(0.7)
    for conv in convs:
        # Each observation is stored on its session's day (UTC), as a bot learning it from
        # that session would store it.
        days = {s.number: s.date.replace(tzinfo=UTC) for s in conv.sessions}
        dated = [(o, days.get(n)) for n in sorted(conv.observations) for o in conv.observations[n]]
        obs = [o for o, _ in dated]
        key = f"bench:{conv.name}"
        results = await store.add_many(
            user_key=key,
            memories=[
                NewMemory(text=o.text, source="import", created_at=day, updated_at=day)
                for o, day in dated
            ],
            dedupe=dedupe,
        )
        evidence: dict[int, set[str]] = {}
        for o, r in zip(obs, results, strict=True):
            evidence.setdefault(r.id, set()).update(o.evidence)
        users.append(
            UserData(conv, key, evidence, [o.text for o in obs], [o.evidence for o in obs])
        )
    return users


async def measure_selfmind(recaller: Recaller, users: Sequence[UserData]) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    n = 0
    for u in users:
        for q in u.conv.questions:
            found = await recaller.recall(user_key=u.user_key, query=q.text, k=max(KS))
            n += 1
            for k in KS:
                if any(u.evidence[s.memory.id] & q.evidence for s in found[:k]):
                    hits[k] += 1
    return {f"hit@{k}": round(hits[k] / n, 3) for k in KS}


def measure_reference(users: Sequence[UserData]) -> dict[str, float]:
    hits = dict.fromkeys(KS, 0)
    n = 0
    for u in users:
        for q in u.conv.questions:
            ranked = reference_bm25.rank(q.text, u.texts, max(KS))
            n += 1
            for k in KS:
                if any(u.text_evidence[i] & q.evidence for i, _ in ranked[:k]):
                    hits[k] += 1
    return {f"hit@{k}": round(hits[k] / n, 3) for k in KS}


def synthetic_texts(convs: Sequence[Conversation]) -> list[str]:
    pool = [o.text for c in convs for o in c.all_observations()]
    pool += [t.text for c in convs for s in c.sessions for t in s.turns if t.text.strip()]
    return pool


def synthetic_batches(
    pool: Sequence[str], users: int, per_user: int
) -> Iterator[tuple[str, list[str]]]:
    """``(user key, texts)`` of each synthetic user: the same for every backend and run."""
    rng = random.Random(20261129)
    for u in range(users):
        seen: dict[str, int] = {}
        batch = []
        for _ in range(per_user):
            text = rng.choice(pool)[:199]
            seen[text] = seen.get(text, 0) + 1
            if seen[text] > 1:
                text = f"{text[:185]} (again {seen[text]})"
            batch.append(text)
        yield f"synthetic:{u}", batch


async def build_synthetic(path: Path, pool: Sequence[str], users: int, per_user: int) -> None:
    store = await SQLiteStore.open(str(path))
    bar, task = progress(users, "building synthetic store")
    try:
        for user_key, texts in synthetic_batches(pool, users, per_user):
            batch = [NewMemory(text=text, source="import") for text in texts]
            await store.add_many(user_key=user_key, memories=batch, dedupe=None)
            if bar is not None:
                bar.advance(task)  # type: ignore[attr-defined]
    finally:
        if bar is not None:
            bar.stop()  # type: ignore[attr-defined]
        await store.close()


@asynccontextmanager
async def sqlite_small(tmp: Path) -> AsyncIterator[Store]:
    store = await SQLiteStore.open(str(tmp / "small.db"))
    try:
        yield store
    finally:
        await store.close()


SCHEMA = MIGRATIONS[-1][0]
"""The number of the last SQLite migration this code applies: the schema it writes."""


def cache_dir(schema: int = SCHEMA) -> Path:
    """The folder of the cached synthetic SQLite stores of ``schema`` (``bench/.cache/schema-N``).

    One folder a schema: code that does not know a newer schema refuses a store migrated to it,
    so a ``--baseline`` tree (:func:`bench.use.latency_rounds`), whose ``bench/.cache`` is this
    tree's, reads its own schema's folder there and builds its store in it when none is, while
    trees of the same schema share one."""
    return CACHE / f"schema-{schema}"


@asynccontextmanager
async def sqlite_big(
    tmp: Path, convs: Sequence[Conversation], users: int, per_user: int
) -> AsyncIterator[Store]:
    """A copy of the cached synthetic SQLite store (built on first use)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    # v2: the store with places (SQLite m017), as the code before the schema folders named it
    # (a --baseline tree of that code finds it under the same name in its schema's folder).
    cached = folder / f"synthetic-{users}x{per_user}-v2.db"
    if not cached.exists():
        t0 = time.perf_counter()
        partial = cached.with_suffix(".partial")
        for suffix in ("", "-wal", "-shm"):
            Path(str(partial) + suffix).unlink(missing_ok=True)
        await build_synthetic(partial, synthetic_texts(convs), users, per_user)
        partial.rename(cached)
        print(
            f"built {users * per_user:,} synthetic memories in {time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
        )
    big_path = tmp / "big.db"
    shutil.copyfile(cached, big_path)
    os.chmod(big_path, 0o600)  # as the store makes its own files: no start-up warning
    store = await SQLiteStore.open(str(big_path))
    try:
        yield store
    finally:
        await store.close()


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def open_stores(
    args: argparse.Namespace, tmp: Path, convs: Sequence[Conversation]
) -> tuple[AbstractAsyncContextManager[Store], AbstractAsyncContextManager[Store]]:
    """The small store (benchmark users only) and the large one (synthetic users too)."""
    if args.backend == "postgres":
        from bench import postgres_bench

        server = postgres_bench.server_url(args.database_url)
        pool = synthetic_texts(convs)
        return postgres_bench.postgres_small(server), postgres_bench.postgres_big(
            server, synthetic_batches, pool, args.scale_users, args.scale_per_user
        )
    return sqlite_small(tmp), sqlite_big(tmp, convs, args.scale_users, args.scale_per_user)


def hybrid_of(store: Store) -> HybridRecaller:
    """Hybrid recall over ``store`` (needs the semantic extra)."""
    from core.memory.embeddings import load_embedder
    from core.memory.hybrid import HybridRecaller

    return HybridRecaller(store, load_embedder(None))


async def timed(recaller: Recaller, user_key: str, questions: Sequence[str]) -> list[float]:
    for q in questions:  # one pass to warm caches
        await recaller.recall(user_key=user_key, query=q, k=6)
    out = []
    for q in questions:
        t0 = time.perf_counter()
        await recaller.recall(user_key=user_key, query=q, k=6)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def run(args: argparse.Namespace) -> dict[str, object]:
    convs = load_all(Path(args.data), args.conversations)
    questions = [q.text for c in convs for q in c.questions]
    recalls = [r.strip() for r in args.recall.split(",") if r.strip()]
    with_hybrid = "hybrid" in recalls
    hybrid: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        small_store, big_store = open_stores(args, Path(tmp), convs)
        async with small_store as small:
            users = await load_users(small, convs)
            selfmind = await measure_selfmind(BM25Recaller(small), users)
            if with_hybrid:
                hybrid = await measure_selfmind(hybrid_of(small), users)
        reference = measure_reference(users)

        async with big_store as big:
            shared_users = await load_users(big, convs)
            shared = await measure_selfmind(BM25Recaller(big), shared_users)
            if with_hybrid:
                wrapped = hybrid_of(big)
                hybrid["hit@6_shared_store"] = (await measure_selfmind(wrapped, shared_users))[
                    "hit@6"
                ]
                t0 = time.perf_counter()
                await wrapped.reindex(user_key="synthetic:0")
                embed_s = time.perf_counter() - t0
                hybrid_latencies = await timed(wrapped, "synthetic:0", questions[:LATENCY_QUERIES])

            probe = "synthetic:0"
            user_memories = await big.count(user_key=probe)
            stats = await big.stats()
            for q in questions[:LATENCY_QUERIES]:  # one pass to warm caches (both backends)
                await big.search(user_key=probe, query=q, k=6)
            latencies = []
            for q in questions[:LATENCY_QUERIES]:
                t0 = time.perf_counter()
                await big.search(user_key=probe, query=q, k=6)
                latencies.append((time.perf_counter() - t0) * 1000)
            texts = [m.text for m in await big.export(user_key=probe)]
    ref_latencies = []
    for q in questions[:REFERENCE_LATENCY_QUERIES]:
        t0 = time.perf_counter()
        reference_bm25.rank(q, texts, 6)
        ref_latencies.append((time.perf_counter() - t0) * 1000)
    p50 = statistics.median(latencies)
    ref_p50 = statistics.median(ref_latencies)
    result: dict[str, object] = {
        "backend": args.backend,
        "selfmind": {**selfmind, "hit@6_shared_store": shared["hit@6"]},
        "reference_bm25": reference,
        "scale": {
            "memories_total": stats.total,
            "user_memories": user_memories,
            "selfmind_p50_ms": round(p50, 3),
            "selfmind_p95_ms": round(percentile(latencies, 95), 3),
            "reference_p50_ms": round(ref_p50, 3),
            "speedup_p50": round(ref_p50 / p50, 1),
        },
        "questions": len(questions),
    }
    if with_hybrid:
        result["hybrid"] = hybrid
        result["hybrid_scale"] = {
            "user_memories": user_memories,
            "hybrid_p50_ms": round(statistics.median(hybrid_latencies), 3),
            "hybrid_p95_ms": round(percentile(hybrid_latencies, 95), 3),
            "embed_10k_s": round(embed_s, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    return result


def print_table(result: dict[str, object]) -> None:
    sm = result["selfmind"]
    ref = result["reference_bm25"]
    sc = result["scale"]
    assert isinstance(sm, dict)
    assert isinstance(ref, dict)
    assert isinstance(sc, dict)
    print(f"LoCoMo retrieval, {result['questions']} questions (categories 1-4)")
    print(f"{'ranker':<34}{'Hit@1':>8}{'Hit@6':>8}{'Hit@10':>8}")
    label = {
        "sqlite": "SelfMind SQLite (FTS5 + BM25)",
        "postgres": "SelfMind PostgreSQL (GIN + BM25)",
    }
    print(
        f"{label[str(result['backend'])]:<34}"
        f"{sm['hit@1']:>8.3f}{sm['hit@6']:>8.3f}{sm['hit@10']:>8.3f}"
    )
    print(
        f"{'reference Okapi BM25 (pure Python)':<34}"
        f"{ref['hit@1']:>8.3f}{ref['hit@6']:>8.3f}{ref['hit@10']:>8.3f}"
    )
    print(
        f"SelfMind Hit@6 in the shared store ({sc['memories_total']:,} memories): "
        f"{sm['hit@6_shared_store']:.3f}"
    )
    print(
        f"recall latency, user with {sc['user_memories']:,} memories: "
        f"SelfMind p50 {sc['selfmind_p50_ms']:.2f} ms, p95 {sc['selfmind_p95_ms']:.2f} ms; "
        f"reference p50 {sc['reference_p50_ms']:.1f} ms; speedup {sc['speedup_p50']}x"
    )
    hy = result.get("hybrid")
    hs = result.get("hybrid_scale")
    if isinstance(hy, dict) and isinstance(hs, dict):
        print(
            f"{'SelfMind hybrid (BM25 + MiniLM, RRF)':<34}"
            f"{hy['hit@1']:>8.3f}{hy['hit@6']:>8.3f}{hy['hit@10']:>8.3f}"
            f"   (shared store Hit@6 {hy['hit@6_shared_store']:.3f})"
        )
        print(
            f"hybrid recall latency, user with {hs['user_memories']:,} memories: "
            f"p50 {hs['hybrid_p50_ms']:.2f} ms, p95 {hs['hybrid_p95_ms']:.2f} ms; "
            f"embedding them took {hs['embed_10k_s']} s; peak RSS {hs['peak_rss_mb']} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL server for --backend postgres (a database there to connect to; the"
        " bench creates and drops its own)",
    )
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--conversations", nargs="*", default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument(
        "--recall", default="bm25", help="bm25, or bm25,hybrid (needs the semantic extra)"
    )
    parser.add_argument("--scale-users", type=int, default=100)
    parser.add_argument("--scale-per-user", type=int, default=10_000)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print_table(result)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
