"""Team memory (a channel's own memory): the labelled team cases and the channel block's
tokens, measured as the turn loop builds them (:meth:`core.memory.team.TeamMemory.context`).

    python bench/team.py [--json] [--data DIR]

1. **Team cases** (``core/data/team_cases.jsonl``: 24 decisions written for this project,
   each with a later member's question in other words, asked in 7 places; the decisions of
   every third pair are held out and reported apart): the decision is taught in a channel
   (public, or private for the ``team_private_*`` categories) whose memory is on and holds
   300 entries, the decision the oldest, so it is outside the cached block and only recall
   can bring it; the question is asked in the same channel, another channel, a DM, a group
   DM, another workspace, or the same channel once public (unreviewed). A case passes when
   the decision is in the prompt exactly when it should be.
2. **Channel block tokens** for a channel with 300 entries (LoCoMo observations written as
   team entries, each with a speaker): the cached block, and the block plus the entries
   recalled for each LoCoMo question, p50 / p95 (:func:`core.memory.profile.estimate_tokens`),
   at the default ``SELFMIND_CHANNEL_MEMORY_TOKENS`` (1,200).

Also printed by ``bench/use.py``. LoCoMo (``--data``, default /work/shared/data/locomo) is
optional: without it the fillers are the other decisions only and part 2 is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.memory.profile import estimate_tokens
from core.memory.team import TeamMemory, channel_block, recalled_lines
from core.rules.dedupe import Deduper
from core.settings import load_settings
from core.store.sqlite.store import SQLiteStore
from core.types import Attribution, NewMemory, Place, PlaceKind

SETTINGS = load_settings()
ENTRIES = 300
DEFAULT_DATA = Path("/work/shared/data/locomo")


def load_team_cases() -> list[dict[str, Any]]:
    """The labelled team cases (``core/data/team_cases.jsonl``)."""
    text = resources.files("core").joinpath("data/team_cases.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def place_of(spec: dict[str, Any]) -> Place:
    return Place(
        platform=spec["platform"],
        kind=cast(PlaceKind, spec["kind"]),
        workspace=spec["workspace"],
        channel=spec["channel"],
    )


def locomo_entries(data: Path, n: int) -> list[str]:
    """Up to ``n`` LoCoMo observations as third-person entries (the speaker named), or []
    without the data set."""
    if not data.exists():
        return []
    from bench.locomo import load_all

    out: list[str] = []
    for conv in load_all(data):
        for number in sorted(conv.observations):
            for o in conv.observations[number]:
                if len(out) < n and len(o.text) < 200:
                    out.append(o.text)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def fill_channel(
    store: SQLiteStore, team: TeamMemory, place: Place, first: str, fillers: Sequence[str]
) -> None:
    """Record ``place`` as a channel with its memory on, then ``first`` (oldest) and the
    fillers (newer), up to :data:`ENTRIES`, each with a speaker."""
    key = place.channel_key
    assert key is not None
    await store.see_channel(place=place)
    await store.set_channel_memory(channel_key=key, on=True, by="bench", at=datetime.now(UTC))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    texts = [first, *[f for f in fillers if f != first]][:ENTRIES]
    memories = [
        NewMemory(
            text=t,
            origin="shared",
            created_at=start + timedelta(hours=i),
            updated_at=start + timedelta(hours=i),
        )
        for i, t in enumerate(texts)
    ]
    results = await store.add_many(user_key=key, memories=memories, dedupe=None)
    await store.attribute(
        channel_key=key,
        entries=[
            Attribution(
                memory_id=r.id,
                said_at=start + timedelta(hours=i),
                said_by=f"slack:T1:U{i % 7}",
                said_by_name=("Alice", "Bob", "Carol", "Dev", "Eve", "Femi", "Gus")[i % 7],
            )
            for i, r in enumerate(results)
        ],
    )


async def measure_team_cases(data: Path) -> dict[str, Any]:
    """Part 1: share of cases passing, by category and split."""
    cases = load_team_cases()
    decisions = sorted({c["entry"] for c in cases})
    filler_pool = locomo_entries(data, ENTRIES)
    by: dict[str, dict[str, list[bool]]] = {}
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, case in enumerate(cases):
            store = await SQLiteStore.open(str(Path(tmp) / f"case{n}.db"), synchronous="normal")
            try:
                team = TeamMemory(
                    store,
                    deduper=Deduper(SETTINGS.dedupe_threshold),
                    budget_tokens=SETTINGS.channel_memory_tokens,
                )
                fillers = [d for d in decisions if d != case["entry"]] + filler_pool
                taught = place_of(case["taught_in"])
                await fill_channel(store, team, taught, case["entry"], fillers)
                context = await team.context(
                    place=place_of(case["asked_in"]),
                    query=case["message"],
                    k=SETTINGS.top_k,
                )
                held = set()
                if context is not None:
                    held = {m.text for m in context.block}
                    held |= {s.memory.text for s in context.recalled}
                ok = (case["entry"] in held) == case["needed"]
            finally:
                await store.close()
            by.setdefault(case["category"], {}).setdefault(case["split"], []).append(ok)
            if not ok:
                failed.append(case["id"])
    table = {
        cat: {split: sum(v) / len(v) for split, v in splits.items()}
        | {"n": sum(len(v) for v in splits.values())}
        for cat, splits in by.items()
    }
    return {"n_cases": len(cases), "categories": table, "failed": failed}


async def measure_block_tokens(data: Path) -> dict[str, Any] | None:
    """Part 2: the channel block's tokens for a channel with :data:`ENTRIES` entries."""
    entries = locomo_entries(data, ENTRIES)
    if len(entries) < ENTRIES:
        return None
    from bench.locomo import load_all

    questions = [q.text for c in load_all(data) for q in c.questions]
    place = Place(platform="slack", kind="public_channel", workspace="T1", channel="C1")
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(str(Path(tmp) / "block.db"), synchronous="normal")
        try:
            team = TeamMemory(
                store,
                deduper=Deduper(SETTINGS.dedupe_threshold),
                budget_tokens=SETTINGS.channel_memory_tokens,
            )
            await fill_channel(store, team, place, entries[0], entries[1:])
            block, total = [], []
            for question in questions:
                context = await team.context(place=place, query=question, k=SETTINGS.top_k)
                assert context is not None
                cached = estimate_tokens(channel_block(context) or "")
                block.append(cached)
                total.append(cached + estimate_tokens("\n".join(recalled_lines(context))))
        finally:
            await store.close()
    return {
        "entries": ENTRIES,
        "messages": len(questions),
        "budget_tokens": SETTINGS.channel_memory_tokens,
        "in_block": len(context.block),
        "block_p50": statistics.median(block),
        "block_p95": percentile(block, 95),
        "with_recalled_p50": statistics.median(total),
        "with_recalled_p95": percentile(total, 95),
    }


async def run(data: Path) -> dict[str, Any]:
    return {
        "team_cases": await measure_team_cases(data),
        "channel_block": await measure_block_tokens(data),
    }


def print_table(result: dict[str, Any]) -> None:
    cases = result["team_cases"]
    print(f"team cases ({cases['n_cases']}): share where the decision is in the prompt exactly")
    print("when it should be")
    print(f"{'category':<28}{'n':>5}{'tuning':>10}{'held out':>10}")
    for cat, row in cases["categories"].items():
        print(
            f"{cat:<28}{row['n']:>5}{row.get('tuning', float('nan')):>10.3f}"
            f"{row.get('held_out', float('nan')):>10.3f}"
        )
    if cases["failed"]:
        print("failed: " + ", ".join(cases["failed"]))
    block = result["channel_block"]
    if block is None:
        print("channel block: skipped (no LoCoMo data)")
        return
    print(
        f"channel block, {block['entries']} entries ({block['in_block']} in the block at"
        f" {block['budget_tokens']} tokens), {block['messages']} messages: cached block"
        f" p50 / p95 {block['block_p50']:.0f} / {block['block_p95']:.0f} tokens; with the"
        f" entries recalled {block['with_recalled_p50']:.0f} / {block['with_recalled_p95']:.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    args = parser.parse_args()
    result = asyncio.run(run(Path(args.data)))
    print_table(result)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
