"""The CPU a channel's own memory costs a busy bot: N users at once in a few busy channels,
the channels' memory off, then on, CPU per turn side by side in one run.

    python bench/team_load.py [--users 200] [--channels 10] [--turns-per-user 3]
                              [--entries 300] [--rounds 2] [--team-every 10] [--json]

The turn loop, reflection and the SQLite store run in this process, as the bot composes them
(:class:`core.chat.loop.TurnLoop`, :class:`core.memory.reflection.Reflector`); the fake
Anthropic API runs as a child process (``python -m tests.fakes.anthropic_server``), so this
process's CPU (``time.process_time()``: the event loop and the store's threads) is the bot's
alone. Each user sends ``--turns-per-user`` messages, one after another, in a thread of its
own in one of ``--channels`` busy channels (Slack places, all users at once); every channel
holds ``--entries`` team entries from the start. ``off``: the channels' memory is off (the
entries kept, unused); ``on``: on, so every turn reads the channel's settings (and its
entries when they changed), builds the cached block and recalls over them, and every
reflection asks for team entries; the fake returns one personal memory a turn (as
bench/load.py) and a team entry in one reflection of ``--team-every`` (default 10: most
exchanges settle nothing; 1 is the worst case, a new entry every turn). CPU is counted
from just before the burst until every reflection is done, per turn; the two runs
alternate ``--rounds`` times, each on a fresh store. The issue's target: ``on`` within
1.15x of ``off``.

(``bench/load.py`` drives the real ``selfmind slack`` process with DMs only; this bench
keeps the same shape of burst in channels, without the Slack side, which is the same for
both runs.)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.chat.loop import IncomingMessage, TurnLoop
from core.memory.reflection import Reflector
from core.model.claude import ClaudeChatModel
from core.rules.dedupe import Deduper
from core.settings import load_settings
from core.store.sqlite.store import SQLiteStore
from core.types import Attribution, NewMemory, Place
from tests.fakes.anthropic_server import Reply

REPO = Path(__file__).resolve().parent.parent
API_KEY = "sk-ant-bench"
TOPICS = (
    "billing database migration owner runbook deploy release staging tests pager rota wiki "
    "dashboard alerts terraform python review sprint incident postmortem flags search"
).split()
_learned = itertools.count()
TEAM_EVERY = int(os.environ.get("TEAM_EVERY", "10"))
"""One reflection in this many settles something for the team (``--team-every``; the fake
runs as a child process and reads it from its environment)."""


def respond(body: dict[str, Any]) -> Any:
    """The fake's replies: a short answer; a reflection with one memory a turn, and one team
    entry when the schema asks for them."""
    fmt = (body.get("output_config") or {}).get("format") or {}
    if not fmt:
        return Reply(text="Answer: fine, noted and done.")
    i = next(_learned)
    words = " ".join(TOPICS[(i * 7 + j * 3) % len(TOPICS)] for j in range(5))
    out: dict[str, Any] = {
        "memories": [
            {
                "text": f"The user noted {words} ({i}).",
                "kind": "context",
                "category": "general",
                "supersedes": [],
            }
        ]
    }
    if "team" in ((fmt.get("schema") or {}).get("properties") or {}) and i % TEAM_EVERY == 0:
        out["team"] = [
            {"text": f"The team settled {words} ({i}).", "kind": "fact", "category": "workflow"}
        ]
    return Reply(text=json.dumps(out))


def rule(i: int) -> str:
    return " ".join(TOPICS[(i * 5 + j) % len(TOPICS)] for j in range(6))


def place(n: int) -> Place:
    return Place(platform="slack", kind="public_channel", workspace="T1", channel=f"CBUSY{n}")


async def seed(store: SQLiteStore, channels: int, entries: int, on: bool) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(channels):
        key = f"slack:T1:CBUSY{n}"
        await store.see_channel(place=place(n))
        await store.set_channel_memory(channel_key=key, on=on, by="bench", at=start)
        memories = [
            NewMemory(
                text=f"The team agreed {rule(i)} rule {i}.",
                origin="shared",
                created_at=start + timedelta(minutes=i),
            )
            for i in range(entries)
        ]
        results = await store.add_many(user_key=key, memories=memories, dedupe=None)
        await store.attribute(
            channel_key=key,
            entries=[
                Attribution(memory_id=r.id, said_at=start, said_by="slack:T1:U0", said_by_name="A")
                for r in results
            ],
        )


async def one_run(base_url: str, args: argparse.Namespace, on: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            anthropic_api_key=API_KEY,
            anthropic_base_url=base_url,
            db=str(Path(tmp) / "load.db"),
            sqlite_synchronous="normal",
            recall="bm25",
        )
        store = await SQLiteStore.open(str(Path(tmp) / "load.db"), synchronous="normal")
        model = ClaudeChatModel.from_settings(settings)
        reflector = Reflector(
            store=store,
            model=model,
            deduper=Deduper(settings.dedupe_threshold),
            retry_delay_s=0.0,
            model_name=settings.reflection_model,
        )
        loop = TurnLoop(store=store, model=model, reflector=reflector, settings=settings)
        try:
            await seed(store, args.channels, args.entries, on)
            await loop.start()
            cpu0, wall0 = time.process_time(), time.monotonic()

            async def user(u: int) -> None:
                n = u % args.channels
                for k in range(args.turns_per_user):
                    words = " ".join(TOPICS[(u * 3 + k * 7 + i) % len(TOPICS)] for i in range(8))
                    message = IncomingMessage(
                        user_key=f"slack:T1:U{u:04d}",
                        conversation_key=f"slack:T1:CBUSY{n}:{u}.0",
                        text=f"what did we decide about {words}?",
                        origin="shared",
                        sent_at=datetime.now(UTC),
                        author=f"user{u}",
                        platform_ref=f"{u}.{k + 1}",
                        where="a Slack channel thread",
                        workspace="T1",
                        place=place(n),
                    )
                    async for _ in loop.answer(message):
                        pass

            await asyncio.gather(*(user(u) for u in range(args.users)))
            assert await reflector.drain(600)
            cpu = time.process_time() - cpu0
            wall = time.monotonic() - wall0
            turns = args.users * args.turns_per_user
            team = 0
            for n in range(args.channels):
                team += await store.count(user_key=f"slack:T1:CBUSY{n}")
        finally:
            await loop.shutdown(5)
            await model.aclose()
            await store.close()
    return {
        "memory": "on" if on else "off",
        "cpu_ms_per_turn": 1000 * cpu / turns,
        "wall_s": wall,
        "channel_entries_after": team,
    }


def start_fake(team_every: int = 10) -> subprocess.Popen[str]:
    """The fake Anthropic API as a child process (its CPU is not this process's)."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "tests.fakes.anthropic_server", "--port", "0",
            "--first-token-delay-s", "0.2", "--chunk-size", "4", "--chunk-delay-s", "0.005",
            "--responder", "bench.team_load:respond",
        ],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "TEAM_EVERY": str(team_every)},
    )  # fmt: skip


async def run(args: argparse.Namespace) -> dict[str, Any]:
    fake = start_fake(args.team_every)
    try:
        assert fake.stdout is not None
        base_url = fake.stdout.readline().strip()
        rows = []
        for r in range(args.rounds):
            for on in (False, True):
                row = await one_run(base_url, args, on)
                row["round"] = r + 1
                rows.append(row)
                print(
                    f"round {r + 1} memory {row['memory']:<3}: {row['cpu_ms_per_turn']:.2f} ms CPU"
                    f" a turn, wall {row['wall_s']:.1f} s, channel entries after"
                    f" {row['channel_entries_after']}",
                    file=sys.stderr,
                )
    finally:
        fake.terminate()
        fake.wait(10)
    off = [r["cpu_ms_per_turn"] for r in rows if r["memory"] == "off"]
    on_ = [r["cpu_ms_per_turn"] for r in rows if r["memory"] == "on"]
    return {
        "users": args.users,
        "channels": args.channels,
        "turns": args.users * args.turns_per_user,
        "entries": args.entries,
        "team_every": args.team_every,
        "rows": rows,
        "off_median": statistics.median(off),
        "on_median": statistics.median(on_),
        "ratio": statistics.median(on_) / statistics.median(off),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--turns-per-user", type=int, default=3)
    parser.add_argument("--entries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--team-every", type=int, default=10, help="one reflection in N returns a team entry"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(
        f"{result['users']} users, {result['turns']} turns in {result['channels']} channels of"
        f" {result['entries']} entries, a team entry every {result['team_every']} reflections:"
        f" CPU a turn off {result['off_median']:.2f} ms, on"
        f" {result['on_median']:.2f} ms, on/off {result['ratio']:.2f}x (target 1.15x)"
    )
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
