"""What erasing costs: one forget in a large shared store, and forget-all 5,000 vs 50,000.

    python bench/forget.py [--memories 1000000] [--backend sqlite|postgres|both] [--json]
    (PostgreSQL: SELFMIND_BENCH_DATABASE_URL, an empty database it may fill and drop from)

Part 1, SQLite only (the FTS5 question). A store of ``--memories`` memories spread over
users of 100 each. One memory of one user is forgotten by three mechanisms in the same file:

- ``tombstone`` (the old mechanism): FTS5 ``delete`` only. Cheap, but the word's index term
  stays in the file (checked by searching the file's bytes after a WAL truncate);
- ``optimize-all`` (the obvious fix): the same on one unsharded index of every memory, then
  ``optimize``: the whole index is rewritten while the write lock is held;
- ``sharded`` (this store, :meth:`core.store.sqlite.store.SQLiteStore.forget`): the user's index
  is one of 32; only it is rewritten, then the WAL is truncated.

Part 2, both backends: ``forget_all`` of a user with 5,000 and of one with 50,000 memories
(the store also holds ``--others`` memories of other users) while another user runs a
``/memories`` search and a ``/remember`` in a loop: the wall time of each forget-all, the
ratio (target at most 12x, under 2 s for 50,000), and the other user's worst and median
command latency during it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.synthetic import sentences
from core.memory.service import MemoryService
from core.rules.text import index_terms
from core.runtime import open_store
from core.store.seams import Store
from core.store.sqlite.migrations import FTS_SHARDS
from core.store.sqlite.store import SQLiteStore
from core.types import NewMemory

MARKER = "quizzaciously"
PG_ENV = "SELFMIND_BENCH_DATABASE_URL"


async def fill(store: Store, users: dict[str, int], texts: list[str]) -> None:
    """``users[key]`` memories each, taken from ``texts`` in order (bulk path, no dedupe)."""
    at = 0
    for key, n in users.items():
        for start in range(0, n, 5000):
            chunk = texts[at + start : at + min(n, start + 5000)]
            await store.add_many(
                user_key=key, memories=[NewMemory(text=t) for t in chunk], dedupe=None
            )
        at += n


def file_holds(path: str, needle: bytes) -> bool:
    """Whether the database file or its WAL holds ``needle``."""
    return any(
        Path(path + s).exists() and needle in Path(path + s).read_bytes() for s in ("", "-wal")
    )


async def one_forget(n: int) -> list[dict[str, Any]]:
    texts = sentences(n, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/memory.db"
        store = await SQLiteStore.open(path, synchronous="normal")
        t0 = time.perf_counter()
        await fill(store, {f"cli:u{i}": 100 for i in range(n // 100)}, texts)
        conn = store._conn
        await conn.execute(
            "CREATE VIRTUAL TABLE baseline_fts USING fts5("
            " terms, content='', columnsize=0, tokenize=\"unicode61 tokenchars '_'\")"
        )
        await conn.execute("INSERT INTO baseline_fts(rowid, terms) SELECT id, terms FROM memories")
        for fts in ["baseline_fts"] + [f"memories_fts_{k}" for k in range(FTS_SHARDS)]:
            await conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
        await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        fill_s = time.perf_counter() - t0
        size_mb = Path(path).stat().st_size / 1e6
        rows = []
        for mechanism in ("tombstone", "optimize-all", "sharded"):
            key = f"cli:victim-{mechanism}"
            service = MemoryService(store)
            added = await service.remember(user_key=key, text=f"The user says {MARKER} a lot.")
            uid = (await store._fetchone("SELECT uid FROM users WHERE user_key = ?", (key,)))[0]
            # FTS5 leaves store a term as a suffix after the prefix it shares with the
            # term before it, so the stem is searched, not only the whole "u{uid}_" term.
            term = index_terms(uid, MARKER)[0].split("_", 1)[1].encode()
            row = await store._fetchone("SELECT terms FROM memories WHERE id = ?", (added.id,))
            terms = row[0]
            if mechanism != "sharded":
                await conn.execute(
                    "INSERT INTO baseline_fts(rowid, terms) VALUES (?, ?)", (added.id, terms)
                )
            # A memory stored long ago: its postings sit in the big merged segment.
            for fts in ("baseline_fts", f"memories_fts_{uid % FTS_SHARDS}"):
                await conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('optimize')")
            await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            t = time.perf_counter()
            if mechanism == "sharded":
                await store.forget(user_key=key, memory_id=added.id)
            else:
                async with store._write():
                    await conn.execute("DELETE FROM memories WHERE id = ?", (added.id,))
                    await conn.execute(
                        "INSERT INTO baseline_fts(baseline_fts, rowid, terms)"
                        " VALUES ('delete', ?, ?)",
                        (added.id, terms),
                    )
                    if mechanism == "optimize-all":
                        await conn.execute(
                            "INSERT INTO baseline_fts(baseline_fts) VALUES ('optimize')"
                        )
                await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            took = time.perf_counter() - t
            if mechanism != "sharded":
                # Its sharded twin must not be what the grep finds: erase it as this store does.
                async with store._write():
                    await store._erase_index(uid)
                await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rows.append(
                {
                    "mechanism": mechanism,
                    "store_memories": n,
                    "forget_ms": round(took * 1000, 1),
                    "term_left_in_file": file_holds(path, term),
                }
            )
        await store.close()
        print(f"(filled {n} memories in {fill_s:.0f} s, file {size_mb:.0f} MB)", file=sys.stderr)
    return rows


async def other_user(store: Store, stop: asyncio.Event, lat: list[float]) -> None:
    service = MemoryService(store)
    i = 0
    while not stop.is_set():
        t = time.perf_counter()
        await service.search(user_key="cli:bystander", query="trip season restaurants", k=6)
        await service.remember(user_key="cli:bystander", text=f"The user counted {i} sheep.")
        lat.append(time.perf_counter() - t)
        i += 1
        await asyncio.sleep(0.005)


async def forget_all_round(store: Store, others: int) -> list[dict[str, Any]]:
    texts = sentences(others + 55_000, seed=5)
    users = {f"cli:other{i}": 500 for i in range(others // 500)}
    users |= {"cli:small": 5_000, "cli:large": 50_000}
    await fill(store, users, texts)
    await store.add_many(
        user_key="cli:bystander",
        memories=[NewMemory(text=t) for t in sentences(300, seed=9)],
        dedupe=None,
    )
    rows = []
    for key, n in (("cli:small", 5_000), ("cli:large", 50_000)):
        lat: list[float] = []
        stop = asyncio.Event()
        task = asyncio.create_task(other_user(store, stop, lat))
        await asyncio.sleep(0.2)
        before = len(lat)
        t = time.perf_counter()
        count = await store.forget_all(user_key=key)
        took = time.perf_counter() - t
        during = lat[before:] or [float("nan")]
        await asyncio.sleep(0.05)
        stop.set()
        await task
        assert count == n, (count, n)
        rows.append(
            {
                "memories": n,
                "forget_all_s": round(took, 3),
                "bystander_commands": len(during),
                "bystander_max_ms": round(max(during) * 1000, 1),
                "bystander_p50_ms": round(statistics.median(during) * 1000, 1),
            }
        )
    rows[1]["ratio_to_5000"] = round(rows[1]["forget_all_s"] / rows[0]["forget_all_s"], 1)
    return rows


async def forget_all(backend: str, others: int) -> list[dict[str, Any]]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            store = await open_store(f"sqlite:///{tmp}/memory.db")
            try:
                rows = await forget_all_round(store, others)
            finally:
                await store.close()
    else:
        url = os.environ.get(PG_ENV)
        if not url:
            print(f"(PostgreSQL skipped: set {PG_ENV})", file=sys.stderr)
            return []
        store = await open_store(url)
        try:
            await store._execute("TRUNCATE users, memories, memory_events, turns CASCADE")  # type: ignore[attr-defined]
            rows = await forget_all_round(store, others)
        finally:
            await store.close()
    return [{"backend": backend, **r} for r in rows]


def table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["  ".join(f"{c:>18}" for c in cols)]
    lines += ["  ".join(f"{r.get(c, '')!s:>18}" for c in cols) for r in rows]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--others", type=int, default=50_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--skip-one", action="store_true", help="only the forget-all part")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    one = [] if args.skip_one else await one_forget(args.memories)
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    bulk = [r for b in backends for r in await forget_all(b, args.others)]
    if args.json:
        print(json.dumps({"one_forget": one, "forget_all": bulk}))
    else:
        print(table(one))
        print()
        print(table(bulk))


if __name__ == "__main__":
    asyncio.run(main())
