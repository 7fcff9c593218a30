"""Costs of issue 26 on SQLite: the one-time ids migrations, and how long a forgotten text
outlives a reader's snapshot in ``-wal``.

    python bench/erasure_bound.py [--memories 200000] [--turns 200000] [--hold-s 1 7.5] [--json]

Part 1, ``m011_ids_never_reused`` (``memories`` rebuilt with AUTOINCREMENT): a store of
``--memories`` memories over 100 users is made with every other migration, then opened by
this version, which applies it. Baseline in the same run: opening the migrated store again
(nothing to apply). ``--memories 0`` skips it.

Part 1b, ``m016_turn_ids_never_reused`` (``turns`` rebuilt the same way): a store of
``--turns`` turns (half messages, half answers, over 100 conversations, with a usage row
each answer) made with every other migration, then opened with it; the same baseline.
``--turns 0`` skips it.

Part 2, the WAL bound: a memory is forgotten while another connection (``sqlite3``, as the
CLI or a backup would be) holds a read transaction begun before; the connection holds it
``--hold-s`` seconds, commits, and the time until the memory's word is gone from ``-wal`` is
measured (the bot retries the truncation every ``WAL_RETRY_S``, 5 s). Baseline in the same
run: the same forget with no reader (the truncation at the forget itself).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.memory.service import MemoryService
from core.store.sqlite import base
from core.store.sqlite.base import ts
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory, utcnow

WORD = "zorblaxians"


async def migration(folder: Path, memories: int) -> dict[str, float]:
    async def fill(store: SQLiteStore) -> None:
        per_user = memories // 100
        for user in range(100):
            rows = [
                NewMemory(f"The user {user} owns item {i} of kind {i % 97}.")
                for i in range(per_user)
            ]
            await store.add_many(user_key=f"cli:u{user}", memories=rows, dedupe=None)

    return await timed_migration(folder / "ids.db", "m011_ids_never_reused", fill)


async def turn_migration(folder: Path, turns: int) -> dict[str, float]:
    async def fill(store: SQLiteStore) -> None:
        now = ts(utcnow())

        def insert(conn: sqlite3.Connection) -> None:
            for n in range(turns // 2):
                key, user = f"cli:u{n % 100}:session", f"cli:u{n % 100}"
                cur = conn.execute(
                    "INSERT INTO turns(conversation_key, user_key, role, text, origin, sent_at,"
                    " created_at, reflection) VALUES (?, ?, 'user', ?, 'private', ?, ?, 'done')",
                    (key, user, f"Question {n} about item {n % 97}?", now, now),
                )
                asked = cur.lastrowid
                conn.execute(
                    "INSERT INTO turns(conversation_key, role, text, origin, sent_at,"
                    " created_at, reply_to) VALUES (?, 'assistant', ?, 'private', ?, ?, ?)",
                    (key, f"Answer {n}: item {n % 97} is fine.", now, now, asked),
                )
                conn.execute(
                    "INSERT INTO usage(at, user_key, kind, model, input_tokens, output_tokens,"
                    " cache_read_input_tokens, cache_creation_input_tokens, turn_id)"
                    " VALUES (?, ?, 'chat', 'claude', 900, 120, 800, 0, ?)",
                    (now, user, asked),
                )

        await store._run(insert)

    return await timed_migration(folder / "turns.db", "m016_turn_ids_never_reused", fill)


async def timed_migration(
    path: Path, name: str, fill: Callable[[SQLiteStore], Awaitable[None]]
) -> dict[str, float]:
    """Seconds to open a store ``fill`` made with every migration but ``name`` (which the
    open applies, alone), and to open it again (nothing to apply)."""
    known = base.MIGRATIONS
    timings = {}
    try:
        # Every other migration: the store code that fills it needs the later tables.
        base.MIGRATIONS = [m for m in known if m[1] != name]
        store = await SQLiteStore.open(str(path), synchronous="normal")
        await fill(store)
        await store.close()
        base.MIGRATIONS = known  # this migration is the one left to apply
        for label in (f"open applying {name[:4]}", "open again (baseline)"):
            started = time.perf_counter()
            store = await SQLiteStore.open(str(path))
            timings[label] = time.perf_counter() - started
            await store.close()
    finally:
        base.MIGRATIONS = known
    return timings


async def gone_after(folder: Path, hold_s: float | None) -> float:
    """Seconds from the reader's COMMIT (or from the forget, without a reader) until the
    forgotten word is in no byte of ``-wal``."""
    path = folder / f"wal-{hold_s}.db"
    store = await SQLiteStore.open(str(path))
    service = MemoryService(store)
    try:
        for i in range(40):
            await service.remember(user_key="cli:other", text=f"The user keeps {i} ferrets.")
        added = await service.remember(user_key="cli:u", text=f"The user breeds {WORD}.")
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            if hold_s is not None:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM memories").fetchone()
            started = time.monotonic()
            await service.forget(user_key="cli:u", memory_id=added.id)
            if hold_s is not None:
                await asyncio.sleep(hold_s)
                reader.execute("COMMIT")
                started = time.monotonic()
            wal = Path(f"{path}-wal")
            for _ in range(6000):  # at most a minute
                if WORD.encode() not in wal.read_bytes():
                    return time.monotonic() - started
                await asyncio.sleep(0.01)
            return float("inf")
        finally:
            reader.close()
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--turns", type=int, default=200_000)
    parser.add_argument("--hold-s", type=float, nargs="*", default=[1.0, 7.5])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        result: dict[str, Any] = {
            "memories": args.memories,
            "migration_s": await migration(folder, args.memories) if args.memories else {},
            "turns": args.turns,
            "turn_migration_s": await turn_migration(folder, args.turns) if args.turns else {},
            "wal_gone_s": {"no reader (baseline)": await gone_after(folder, None)},
            "wal_retry_s": base.WAL_RETRY_S,
        }
        for hold in args.hold_s:
            result["wal_gone_s"][f"reader held {hold:g} s"] = await gone_after(folder, hold)
    if args.json:
        print(json.dumps(result))
        return
    for key, title in (
        ("migration_s", f"ids migration, {args.memories:,} memories:"),
        ("turn_migration_s", f"turn ids migration, {args.turns:,} turns:"),
    ):
        if result[key]:
            print(title)
            for label, seconds in result[key].items():
                print(f"  {label:24} {seconds:6.2f} s")
    print(f"forgotten word gone from -wal (retry every {base.WAL_RETRY_S:g} s):")
    for label, seconds in result["wal_gone_s"].items():
        print(f"  {label:24} {seconds:6.2f} s after the forget / the reader's COMMIT")


if __name__ == "__main__":
    asyncio.run(main())
