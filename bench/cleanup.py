"""A cleanup run on one real user's memories, with the fake Claude as a stand-in planner.

    python bench/cleanup.py [--data DIR] [--conversation conv-41] [--json]

All observations of one LoCoMo conversation become one user's memories (through the real
store and dedupe). The fake Anthropic server answers each batch with a plan made by a simple
heuristic (merge memories whose word sets overlap by Jaccard >= 0.5 and that differ in no negation,
number, date or name, keeping the longest
sentence), so this measures the product's batching, checks, store changes and undo, not the
quality of a real model's plan. Reports Claude calls, batch sizes, memories before and after,
and whether undo restored every row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.locomo import DEFAULT_DATA, load_all
from core.memory.cleanup import Cleaner
from core.memory.service import MemoryService
from core.model.claude import ClaudeChatModel
from core.rules.dedupe import compare, jaccard
from core.rules.text import words
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory
from tests.fakes.anthropic_server import running_fake_anthropic

MERGE_JACCARD = 0.5


def heuristic_planner(body: dict[str, Any]) -> str:
    prompt = body["messages"][0]["content"]
    text = prompt if isinstance(prompt, str) else prompt[0]["text"]
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    used: set[int] = set()
    ops = []
    for i, a in enumerate(rows):
        if a["id"] in used:
            continue
        group = [a]
        for b in rows[i + 1 :]:
            similar = jaccard(set(words(a["text"])), set(words(b["text"]))) >= MERGE_JACCARD
            if (
                b["id"] not in used
                and similar
                and compare(b["text"], a["text"]).outcome != "distinct"
            ):
                group.append(b)
        if len(group) > 1:
            used.update(r["id"] for r in group)
            best = max(group, key=lambda r: len(r["text"]))
            ops.append(
                {
                    "op": "merge",
                    "ids": [r["id"] for r in group],
                    "newer_id": 0,
                    "text": best["text"],
                    "kind": "fact",
                    "category": "general",
                    "user_added": [r["id"] for r in group if r["user_added"]],
                    "reason": "near-duplicates",
                }
            )
    return json.dumps({"operations": ops})


def rows(db: Path) -> list[Any]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM memories ORDER BY id").fetchall()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    (conv,) = load_all(Path(args.data), [args.conversation])
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "cleanup.db"
        store = await SQLiteStore.open(str(db))
        service = MemoryService(store)
        user = f"bench:{conv.name}"
        for obs in conv.all_observations():
            text = " ".join(obs.text.split())[:199]
            await store.add(
                user_key=user,
                memory=NewMemory(text=text, source="reflection"),
                dedupe=service.deduper,
            )
        before_rows = rows(db)
        async with running_fake_anthropic(responder=heuristic_planner) as fake:
            model = ClaudeChatModel(
                api_key="sk-bench",
                base_url=fake.base_url,
                chat_model="m",
                reflection_model="m",
                max_tokens=1000,
                memory_max_tokens=1024,
            )
            cleaner = Cleaner(
                store=store, model=model, batch_size=args.batch_size, max_batches=args.max_batches
            )
            result = await cleaner.apply(await cleaner.plan(user_key=user))
            await model.aclose()
        restored = 0
        if result.applied:
            restored = await store.undo_change(user_key=user, change_id=result.applied.change_id)
        await store.close()
        exact = rows(db) == before_rows
    return {
        "conversation": conv.name,
        "observations": sum(1 for _ in conv.all_observations()),
        "before": result.before,
        "after": result.after,
        "calls": result.calls,
        "batches": result.batches,
        "operations": len(result.planned),
        "rejected_batches": result.rejected_batches,
        "tokens": result.usage.input_tokens + result.usage.output_tokens,
        "undo_restored": restored,
        "undo_exact": exact,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--conversation", default="conv-41")
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--max-batches", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = asyncio.run(run(args))
    print(f"cleanup of {r['conversation']} ({r['observations']} observations)")
    print(f"{'memories before':<24}{r['before']:>8}")
    print(f"{'memories after':<24}{r['after']:>8}")
    print(f"{'Claude calls':<24}{r['calls']:>8}")
    print(f"{'batch sizes':<24}{r['batches']}")
    print(f"{'operations':<24}{r['operations']:>8}")
    print(f"{'undo exact':<24}{r['undo_exact']!s:>8}")
    if args.json:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
