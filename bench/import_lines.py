"""Import speed, and a bot writing to the same SQLite file meanwhile.

    python bench/import_lines.py [--lines 50000] [--baseline-lines 2000] [--json]

Imports ``--lines`` synthetic memories (:mod:`bench.synthetic`) with
:meth:`core.memory.service.MemoryService.import_lines` (validate all, dedupe in memory, write in
transactions of ``IMPORT_BATCH``) while a second process on the same file runs a
``/remember`` plus a recall every 10 ms, as a running bot would. Baseline in the same run:
the old mechanism (every line through the store's per-memory dedupe in one transaction,
``add_many`` with a deduper) on ``--baseline-lines`` lines (it is too slow for 50,000).
Reports lines/s (target at least 2,000 for 50,000 lines) and the bot process's worst and
median command latency and errors (target: none) during the import.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import jsonl, sentences
from core.memory.service import MemoryService, parse_import_line
from core.store.sqlite.store import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent

_BOT = textwrap.dedent(
    """
    import asyncio, json, statistics, sys, time
    sys.path.insert(0, sys.argv[2])
    from core.memory.service import MemoryService
    from core.store.sqlite.store import SQLiteStore

    async def main() -> None:
        store = await SQLiteStore.open(sys.argv[1])
        service = MemoryService(store)
        print("ready", flush=True)
        lat, errors, i = [], [], 0
        while not sys.stdin.closed:
            t = time.perf_counter()
            try:
                await service.remember(user_key="discord:7", text=f"The user waters fern {i}.")
                await service.search(user_key="discord:7", query="fern", k=3)
            except Exception as exc:
                errors.append(type(exc).__name__ + ": " + str(exc))
            lat.append(time.perf_counter() - t)
            i += 1
            await asyncio.sleep(0.01)
            if i % 20 == 0 and await asyncio.to_thread(sys.stdin.readline) == "":
                break
        await store.close()
        print(json.dumps({"n": len(lat), "max_s": max(lat), "p50_s": statistics.median(lat),
                          "errors": errors[:3]}), flush=True)

    asyncio.run(main())
    """
)


async def one(n: int, mechanism: str) -> dict[str, Any]:
    lines = jsonl(sentences(n, seed=11))
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/memory.db"
        store = await SQLiteStore.open(path)
        service = MemoryService(store)
        bot = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BOT,
            path,
            str(ROOT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert bot.stdin is not None
        assert bot.stdout is not None
        assert (await bot.stdout.readline()).strip() == b"ready"
        feeder = asyncio.create_task(_feed(bot.stdin))
        t = time.perf_counter()
        if mechanism == "batched":
            result = await service.import_lines(user_key="cli:importer", lines=lines)
            added = result.added
        else:
            memories = [m for i, raw in enumerate(lines, 1) if (m := parse_import_line(raw, i))]
            results = await store.add_many(
                user_key="cli:importer", memories=memories, dedupe=service.deduper
            )
            added = sum(r.status == "added" for r in results)
        took = time.perf_counter() - t
        feeder.cancel()
        bot.stdin.close()
        out = (await bot.stdout.read()).decode()
        await bot.wait()
        await store.close()
    report = json.loads(out.strip().splitlines()[-1])
    return {
        "mechanism": mechanism,
        "lines": n,
        "added": added,
        "lines_per_s": round(n / took),
        "bot_commands": report["n"],
        "bot_max_ms": round(report["max_s"] * 1000, 1),
        "bot_p50_ms": round(report["p50_s"] * 1000, 1),
        "bot_errors": len(report["errors"]),
    }


async def _feed(stdin: asyncio.StreamWriter) -> None:
    """Keep the bot process running: it stops when its stdin closes."""
    while True:
        stdin.write(b"\n")
        await stdin.drain()
        await asyncio.sleep(0.1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--baseline-lines", type=int, default=2_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [
        await one(args.baseline_lines, "one-transaction"),
        await one(args.baseline_lines, "batched"),
        await one(args.lines, "batched"),
    ]
    if args.json:
        print(json.dumps(rows))
        return
    cols = list(rows[0])
    print("  ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]!s:>15}" for c in cols))


if __name__ == "__main__":
    asyncio.run(main())
