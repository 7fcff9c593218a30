"""The kill-9 soak: messages answered exactly once whatever the crashes, on both backends.

    python bench/soak_kill.py [--backend sqlite|postgres|both] [--seeds 1 2 3]
        [--messages 30] [--kills 4] [--baseline] [--pg-url URL] [--json]

Each run starts the real ``selfmind slack --http`` process against the fake Slack and the
fake Anthropic, sends ``--messages`` messages from three users (U1-U3) in their DMs and in
one channel thread (every fourth message, each user in turn, the first one its root), one
every ~0.35 s, delivered as Slack does (retried until acknowledged: 2xx), and SIGKILLs the
process ``--kills`` times at moments drawn from the seed, restarting it at once on the same
port and database. A kill lands while an answer streams (``stream``), while a reflection
call is in flight (``reflect``), or twice in a row (``recovery``: mid-answer, then again
while the restarted process's start-up recovery streams: the double crash); each seed has
at least one ``recovery``. Then the last process drains, is stopped (SIGTERM), started once
more and stopped again (what is left is recovered and reflected), and every acknowledged
message is checked:

- stored: exactly one user turn holds it;
- answered: exactly one answer turn replies to it, equal to its whole answer (the fake's
  answer to message n is ``answer-n: ... end-n.``, streamed in 8-character deltas); on
  Slack, exactly one bot message shows it, whole, with no "still writing" marker, and no
  other bot message holds any part of it (a cut answer was finished or replaced);
- memories: the memory each message states is stored once for its user;
- reflected: every reflection call saw the message's delivered answer, and no turn whose
  answer is missing is marked reflected.

Columns: backend, seed, sent, acknowledged, kills (with kinds), lost (acknowledged and not
answered whole in the store or on Slack), twice (two answers stored or shown, or two user
turns), cut (a part of an answer left on screen), memories missing / twice, reflected
unanswered, wall seconds. ``--baseline`` adds a run with no kill per backend (the same
messages): every count but "acknowledged" must be 0 there too. The last line is JSON:
``{"rows": [...], "exactly_once": bool}``.

PostgreSQL: ``--pg-url`` (default ``$SELFMIND_TEST_DATABASE_URL``) names a server where a
database is created for each run and dropped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.crash_helpers import BotProcess, start_bot
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.loop_helpers import memories_reply
from tests.slack_helpers import BOT_USER, TEAM, slack_process_env

USERS = ("U1", "U2", "U3")
INTERVAL_S = 0.35
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Slack retries an unacknowledged event (after ~0 s, 1 min, 5 min): compressed, and more
of them, so a delivery outlives a restart (a few seconds)."""
NOUNS = (
    "bicycle violin garden kayak telescope lantern piano canoe scooter compass hammock"
    " easel tractor glider harp drone sextant loom kiln trumpet sled banjo quilt anvil"
    " chisel cello yacht tandem abacus dulcimer"
).split()
ADJECTIVES = (
    "crimson amber cobalt ivory olive scarlet teal violet maroon saffron indigo silver"
    " copper jade ochre coral azure umber lilac mint ruby slate bronze pearl cerulean"
    " plum rust sepia topaz emerald"
).split()
NUMBER = re.compile(r"\bm(\d+):")
ANSWERED = re.compile(r"answer-(\d+)\b")


def fact(n: int) -> str:
    return f"{ADJECTIVES[n % 30]} {NOUNS[(n * 7) % 30]} named Zed{n}q"


def said(n: int) -> str:
    return f"m{n}: I own a {fact(n)}."


def answer(n: int) -> str:
    return f"answer-{n}: " + " ".join(f"w{n}x{i}" for i in range(28)) + f" end-{n}."


def memory(n: int) -> str:
    return f"The user owns a {fact(n)}."


def responder(body: dict[str, Any]) -> Any:
    """The fake's answer, derived from the request: message n gets ``answer(n)`` streamed in
    small deltas; its reflection, ``memory(n)`` after 0.3 s."""
    text = json.dumps(body)
    messages = body.get("messages") or []
    last = json.dumps(messages[-1]) if messages else ""
    numbers = NUMBER.findall(last) or NUMBER.findall(text)
    n = int(numbers[-1]) if numbers else -1
    if body.get("stream"):
        return Reply(text=answer(n), chunk_size=8, chunk_delay_s=0.04)
    # A reflection call takes a moment, so a ``reflect`` kill lands while it is in flight.
    return Reply(text=json.dumps(memories_reply((memory(n), "fact", "general"))), delay_s=0.3)


@dataclass
class Row:
    backend: str
    seed: int
    sent: int = 0
    acknowledged: int = 0
    kills: list[str] = field(default_factory=list)
    lost: int = 0
    twice: int = 0
    cut: int = 0
    memories_missing: int = 0
    memories_twice: int = 0
    reflected_unanswered: int = 0
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.lost
            or self.twice
            or self.cut
            or self.memories_missing
            or self.memories_twice
            or self.reflected_unanswered
        )


@dataclass
class Message:
    n: int
    user: str
    event: dict[str, Any]
    channel: str
    acked: bool = False
    statuses: list[int] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def database(backend: str, pg_url: str | None, tmp: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'memory.db'}"
        return
    import asyncpg

    if not pg_url:
        raise SystemExit("postgres: give --pg-url or set SELFMIND_TEST_DATABASE_URL")
    name = f"selfmind_soak_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(pg_url, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield urlunsplit(urlsplit(pg_url)._replace(path="/" + name))
    finally:
        admin = await asyncpg.connect(pg_url, timeout=10)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


def plan(rng: random.Random, messages: int, kills: int) -> list[tuple[int, str]]:
    """(after message index, kind) for each kill moment, ``kills`` SIGKILLs in all (a
    ``recovery`` is two): every kind once when there are kills enough (recovery first, then
    stream, then reflect), the rest drawn; their order and places drawn from ``rng``."""
    kinds: list[str] = []
    budget = kills
    for kind in ("recovery", "stream", "reflect"):
        cost = 2 if kind == "recovery" else 1
        if budget >= cost:
            kinds.append(kind)
            budget -= cost
    while budget > 0:
        kinds.append(rng.choice(("stream", "reflect")))
        budget -= 1
    rng.shuffle(kinds)
    at = sorted(rng.sample(range(2, max(3, messages - 2)), len(kinds)))
    return list(zip(at, kinds, strict=True))


class Soak:
    def __init__(
        self, slack: FakeSlack, claude: FakeAnthropic, db: str, tmp: Path, rng: random.Random
    ) -> None:
        self.slack = slack
        self.claude = claude
        self.db = db
        self.tmp = tmp
        self.rng = rng
        self.port = free_port()
        self.env = slack_process_env(slack, claude.base_url)
        self.bot: BotProcess | None = None
        self.kills: list[str] = []

    async def start(self) -> None:
        for _ in range(20):  # the port may still be held a moment after a kill
            try:
                self.bot = await start_bot(self.db, self.env, self.tmp, port=self.port)
                return
            except AssertionError as exc:
                if "address already in use" not in str(exc).lower():
                    raise
                await asyncio.sleep(0.25)
        raise RuntimeError("the bot could not listen again")

    async def kill(self, kind: str) -> None:
        assert self.bot is not None
        await self.bot.stop(signal.SIGKILL)
        self.kills.append(kind)
        await self.start()

    async def _requests_grow(self, kind: str, timeout_s: float = 6.0) -> bool:
        start = len(self.claude.requests_of(kind))  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.claude.requests_of(kind)) > start:  # type: ignore[arg-type]
                return True
            await asyncio.sleep(0.02)
        return False

    async def crash(self, kind: str) -> None:
        if kind == "reflect":
            await self._requests_grow("extract")
            await asyncio.sleep(self.rng.uniform(0.0, 0.2))  # the call takes 0.3 s
            await self.kill(kind)
            return
        await self._requests_grow("chat")
        await asyncio.sleep(self.rng.uniform(0.1, 0.8))
        await self.kill("stream")
        if kind == "recovery":  # again, while the restart's recovery streams
            await self._requests_grow("chat")
            await asyncio.sleep(self.rng.uniform(0.1, 0.6))
            await self.kill("recovery")

    async def stop(self) -> int:
        assert self.bot is not None
        return await self.bot.stop(signal.SIGTERM)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"


def build_messages(slack: FakeSlack, count: int, seed: int) -> list[Message]:
    out: list[Message] = []
    root: str | None = None
    for n in range(count):
        user = USERS[n % len(USERS)]
        if n % 4 == 3:  # the channel thread
            text = f"{slack.identity.mention} {said(n)}"
            event = slack.events.app_mention(text, user=user, thread_ts=root)
            root = root or str(event["ts"])
            out.append(Message(n, user, event, "C0GENERAL"))
        else:
            event = slack.events.message(said(n), user=user)
            out.append(Message(n, user, event, str(event["channel"])))
    for m in out:
        m.event = slack.events.event_callback(m.event, event_id=f"Ev{seed}x{m.n}")
    return out


def bot_texts(slack: FakeSlack, channels: set[str]) -> list[str]:
    texts: list[str] = []
    for channel in sorted(channels):
        for m in slack.messages(channel):
            if m.get("user") == BOT_USER and str(m.get("text") or "").strip():
                texts.append(str(m["text"]))
    return texts


def all_shown(slack: FakeSlack, acked: list[Message]) -> bool:
    texts = "\n".join(bot_texts(slack, {m.channel for m in acked}))
    return all(f"end-{m.n}." in texts for m in acked) and "still writing" not in texts


async def read_store(db: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(turns: id, role, text, reply_to, reflection), (memories: user key, text, active)."""
    turns_sql = "SELECT id, role, text, reply_to, reflection FROM turns ORDER BY id"
    if db.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as conn:
            turns = conn.execute(turns_sql).fetchall()
            memories = conn.execute(
                "SELECT u.user_key, m.text FROM memories m JOIN users u ON u.uid = m.uid"
                " WHERE m.superseded_by IS NULL"
            ).fetchall()
        return turns, memories
    import asyncpg

    conn = await asyncpg.connect(db, timeout=10)
    try:
        turns = [tuple(r) for r in await conn.fetch(turns_sql)]
        memories = [
            tuple(r)
            for r in await conn.fetch(
                "SELECT u.user_key, m.text FROM memories m JOIN users u ON u.uid = m.uid"
                " WHERE m.superseded_by IS NULL"
            )
        ]
    finally:
        await conn.close()
    return turns, memories


def check(
    row: Row,
    messages: list[Message],
    slack: FakeSlack,
    claude: FakeAnthropic,
    turns: list[tuple[Any, ...]],
    memories: list[tuple[Any, ...]],
) -> None:
    acked = [m for m in messages if m.acked]
    users = [t for t in turns if t[1] == "user"]
    answers: dict[int, list[str]] = {}
    for t in turns:
        if t[1] == "assistant" and t[3] is not None:
            answers.setdefault(int(t[3]), []).append(str(t[2]))
    shown: Counter[int] = Counter()
    whole: dict[int, bool] = {}
    for text in bot_texts(slack, {m.channel for m in messages}):
        numbers = set(ANSWERED.findall(text)) | {x for x in re.findall(r"\bw(\d+)x\d+", text)}
        if not numbers:
            row.problems.append(f"a bot message with no answer: {text[:60]!r}")
            row.twice += 1
            continue
        for x in numbers:
            shown[int(x)] += 1
            whole[int(x)] = answer(int(x)) in text and "still writing" not in text
    stored_memories = Counter((str(u), str(t)) for u, t in memories)
    for m in acked:
        mine = [t for t in users if f"m{m.n}:" in str(t[2])]
        if len(mine) != 1:
            row.problems.append(f"m{m.n}: {len(mine)} user turns")
            if len(mine) > 1:
                row.twice += 1
            else:
                row.lost += 1
                continue
        turn = mine[0]
        got = answers.get(int(turn[0]), [])
        if len(got) > 1 or shown[m.n] > 1:
            row.twice += 1
            row.problems.append(f"m{m.n}: {len(got)} answers stored, {shown[m.n]} shown")
        if not got or got[0].strip() != answer(m.n) or shown[m.n] == 0:
            row.lost += 1
            row.problems.append(f"m{m.n}: answered {bool(got)}, shown {shown[m.n]}")
        elif not whole.get(m.n, False):
            row.cut += 1
            row.problems.append(f"m{m.n}: shown cut")
        count = stored_memories[(f"slack:{TEAM}:{m.user}", memory(m.n))]
        if count == 0:
            row.memories_missing += 1
            row.problems.append(f"m{m.n}: no memory (reflection {turn[4]})")
        elif count > 1:
            row.memories_twice += 1
    for t in users:
        if t[4] == "done" and not answers.get(int(t[0])):
            row.reflected_unanswered += 1
            row.problems.append(f"turn {t[0]} reflected with no answer")
    for request in claude.requests_of("extract"):
        text = json.dumps(request.body)
        asked = NUMBER.findall(text)
        if asked and f"answer-{asked[-1]}:" not in text:
            row.reflected_unanswered += 1
            row.problems.append(f"m{asked[-1]}: a reflection call without its answer")


async def run(backend: str, seed: int, count: int, kills: int, pg_url: str | None) -> Row:
    rng = random.Random(seed)
    row = Row(backend=backend, seed=seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        async with (
            database(backend, pg_url, tmp) as db,
            running_fake_slack() as slack,
            running_fake_anthropic(responder=responder) as claude,
        ):
            soak = Soak(slack, claude, db, tmp, rng)
            messages = build_messages(slack, count, seed)
            moments = plan(rng, count, kills)
            await soak.start()

            async def deliver(m: Message) -> None:
                m.statuses = await slack.deliver_event(
                    soak.url, m.event, retry_delays_s=RETRY_DELAYS_S
                )
                m.acked = any(200 <= s < 300 for s in m.statuses)

            sending: list[asyncio.Task[None]] = []
            for i, m in enumerate(messages):
                sending.append(asyncio.create_task(deliver(m)))
                row.sent += 1
                await asyncio.sleep(INTERVAL_S * rng.uniform(0.6, 1.4))
                for _, kind in [x for x in moments if x[0] == i]:
                    await soak.crash(kind)
            await asyncio.gather(*sending)
            acked = [m for m in messages if m.acked]
            row.acknowledged = len(acked)
            with contextlib.suppress(TimeoutError):  # what is missing is counted below
                await slack.wait_until(
                    lambda: all_shown(slack, acked), what="every answer", timeout_s=60
                )
            await soak.stop()
            await soak.start()  # what is left is recovered, reflections resumed
            await asyncio.sleep(3.0)
            await soak.stop()
            row.kills = soak.kills
            turns, memories = await read_store(db)
            check(row, messages, slack, claude, turns, memories)
    row.wall_s = round(time.monotonic() - started, 1)
    return row


def table(rows: list[Row]) -> str:
    head = (
        f"{'backend':<9}{'seed':>5}{'sent':>6}{'acked':>7}{'kills':>6}  {'kinds':<28}"
        f"{'lost':>5}{'twice':>6}{'cut':>5}{'mem-':>5}{'mem+':>5}{'refl!':>6}{'wall s':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        kinds = ",".join(r.kills) or "-"
        lines.append(
            f"{r.backend:<9}{r.seed:>5}{r.sent:>6}{r.acknowledged:>7}{len(r.kills):>6}  "
            f"{kinds:<28}{r.lost:>5}{r.twice:>6}{r.cut:>5}{r.memories_missing:>5}"
            f"{r.memories_twice:>5}{r.reflected_unanswered:>6}{r.wall_s:>8}"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    rows: list[Row] = []
    for backend in backends:
        runs = [(seed, args.kills) for seed in args.seeds]
        if args.baseline:
            runs.insert(0, (args.seeds[0], 0))
        for seed, kills in runs:
            row = await run(backend, seed, args.messages, kills, args.pg_url)
            rows.append(row)
            print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
            for problem in row.problems[:20]:
                print(f"  {problem}", file=sys.stderr)
    print(table(rows))
    ok = all(r.clean for r in rows)
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [asdict(r) | {"clean": r.clean} for r in rows],
                    "exactly_once": ok,
                }
            )
        )
    return 0 if ok else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--messages", type=int, default=30)
    parser.add_argument("--kills", type=int, default=4)
    parser.add_argument("--baseline", action="store_true", help="add a run with no kill")
    parser.add_argument("--pg-url", default=os.environ.get("SELFMIND_TEST_DATABASE_URL"))
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
