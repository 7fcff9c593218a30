"""Consolidation while quiet: its cost per user-night and its wall time per 1,000 users.

    python bench/consolidation.py [--users 1000] [--memories 25] [--data DIR] [--json]
                                  [--baseline | --no-baseline]

1. **One user with 400 memories** (the first 400 observations of the LoCoMo conversations
   under ``--data``, as stored through the real dedupe; synthetic sentences when the data is
   absent), one night through :class:`core.memory.consolidation.Consolidator` at the
   default settings (25 memories a batch, at most 20 batches): Claude calls and tokens
   (input, cache, output, as the fake Anthropic API counts them: its input count is the
   request's characters / 4, close to the real tokenizer for English), memories tidied. The
   fake plans like ``bench/cleanup.py``'s heuristic (merge near-duplicates), so this
   measures the product's batching and cost, not a real model's judgement.
2. **Wall time per 1,000 users**: ``--users`` users of ``--memories`` synthetic memories
   each, all active, the fake answering every batch with an empty plan (the cost is the
   product's: reading users and history, the budget, batching, the calls over HTTP). The
   baseline, in the same run on a copy of the same database: one pass of the older scheduled
   cleanup (``core.runtime.scheduled_cleanups``: every user with enough memories, planned
   and applied one after another, no budget, no claim, no activity filter).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cleanup import heuristic_planner
from bench.locomo import DEFAULT_DATA, LoCoMoMissing, load_all
from bench.synthetic import sentences
from core.memory.cleanup import Cleaner, apply_run
from core.memory.consolidation import Consolidator, Window
from core.model.claude import ClaudeChatModel
from core.rules.dedupe import Deduper
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, utcnow
from tests.fakes.anthropic_server import running_fake_anthropic

EMPTY_PLAN = json.dumps({"operations": []})


def _model(base_url: str) -> ClaudeChatModel:
    return ClaudeChatModel(
        api_key="sk-bench",
        base_url=base_url,
        chat_model="m",
        reflection_model="m",
        max_tokens=1000,
        memory_max_tokens=1024,
    )


def _night(store: SQLiteStore, model: ClaudeChatModel, budget: int = 10**12) -> Consolidator:
    now = utcnow()
    return Consolidator(
        store=store,
        cleaner=Cleaner(store=store, model=model, batch_size=25, max_batches=20),
        enabled=True,
        window=Window.parse("00:00-00:00"),
        daily_tokens=budget,
        min_memories=20,
        clock=lambda: now,
    )


def observations(data: Path, n: int) -> list[str]:
    """``n`` LoCoMo observations (as one user's memories), else synthetic sentences."""
    texts: list[str] = []
    try:
        conversations = load_all(data, None)
    except LoCoMoMissing:
        conversations = []
    for conv in conversations:
        texts += [" ".join(o.text.split())[:199] for o in conv.all_observations()]
        if len(texts) >= n * 2:
            break
    return texts if len(texts) >= n else sentences(n * 2, seed=3)


async def one_user(data: Path, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "one.db"))
        user, deduper, stored = "bench:user", Deduper(), 0
        for text in observations(data, n):
            if stored >= n:
                break
            r = await store.add(user_key=user, memory=NewMemory(text=text), dedupe=deduper)
            stored += r.status == "added"
        async with running_fake_anthropic(responder=heuristic_planner) as fake:
            model = _model(fake.base_url)
            started = time.perf_counter()
            report = await _night(store, model).run_night()
            wall = time.perf_counter() - started
            await model.aclose()
        await store.close()
    assert report is not None
    assert len(report.users) == 1
    u = report.users[0]
    return {
        "memories": stored,
        "calls": u.calls,
        "tokens": u.tokens,
        "tokens_per_call": round(u.tokens / max(u.calls, 1)),
        "tidied": u.tidied,
        "wall_s": round(wall, 3),
    }


async def seed_many(db: Path, users: int, memories: int) -> None:
    store = await SQLiteStore.open(str(db))
    pool = sentences(users * memories, seed=5)
    for i in range(users):
        rows = [NewMemory(text=t) for t in pool[i * memories : (i + 1) * memories]]
        await store.add_many(user_key=f"bench:u{i:05d}", memories=rows, dedupe=None)
    await store.close()


async def old_pass(store: SQLiteStore, model: ClaudeChatModel) -> int:
    """One pass of ``core.runtime.scheduled_cleanups``' loop (the baseline)."""
    cleaner = Cleaner(store=store, model=model, batch_size=25, max_batches=20)
    calls = 0
    for user_key in await store.users_with_memories(at_least=20):
        run = await cleaner.plan(user_key=user_key)
        await apply_run(store, run)
        calls += run.calls
    return calls


async def many_users(users: int, memories: int, baseline: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db, copy = Path(tmp) / "many.db", Path(tmp) / "base.db"
        await seed_many(db, users, memories)
        shutil.copy(db, copy)
        out: dict[str, Any] = {"users": users, "memories_each": memories}
        async with running_fake_anthropic(responder=lambda body: EMPTY_PLAN) as fake:
            model = _model(fake.base_url)
            if baseline:
                store = await SQLiteStore.open(str(copy))
                started = time.perf_counter()
                calls = await old_pass(store, model)
                out["baseline_s"] = round(time.perf_counter() - started, 2)
                out["baseline_calls"] = calls
                await store.close()
            store = await SQLiteStore.open(str(db))
            started = time.perf_counter()
            report = await _night(store, model).run_night()
            out["consolidation_s"] = round(time.perf_counter() - started, 2)
            assert report is not None
            out["consolidation_calls"] = report.calls
            out["tidied_users"] = len(report.users)
            await store.close()
            await model.aclose()
        out["per_1000_users_s"] = round(out["consolidation_s"] * 1000 / users, 2)
        if baseline:
            out["ratio"] = round(out["consolidation_s"] / max(out["baseline_s"], 1e-9), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--memories", type=int, default=25, help="memories per user (>= 20)")
    parser.add_argument("--one", type=int, default=400, help="memories of the one user")
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    one = asyncio.run(one_user(Path(args.data), args.one))
    many = asyncio.run(many_users(args.users, max(args.memories, 20), args.baseline))
    print(f"one user-night ({one['memories']} memories, fake planner merging near-duplicates)")
    print(f"  {'Claude calls':<28}{one['calls']:>10}")
    print(f"  {'tokens (all kinds)':<28}{one['tokens']:>10}")
    print(f"  {'tokens per call':<28}{one['tokens_per_call']:>10}")
    print(f"  {'memories tidied':<28}{one['tidied']:>10}")
    print(f"  {'wall, s':<28}{one['wall_s']:>10}")
    print(f"{many['users']} users x {many['memories_each']} memories, empty plans")
    print(f"  {'consolidation night, s':<28}{many['consolidation_s']:>10}")
    print(f"  {'  calls':<28}{many['consolidation_calls']:>10}")
    print(f"  {'  per 1,000 users, s':<28}{many['per_1000_users_s']:>10}")
    if args.baseline:
        print(f"  {'old scheduled pass, s':<28}{many['baseline_s']:>10}")
        print(f"  {'  calls':<28}{many['baseline_calls']:>10}")
        print(f"  {'ratio (night / old pass)':<28}{many['ratio']:>10}")
    if args.json:
        print(json.dumps({"one_user": one, "many_users": many}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
