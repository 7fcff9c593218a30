"""A burst of users at once through the real bot: acknowledgement, overhead and cost per turn.

    python bench/load.py [--users 50 200] [--backends sqlite postgres] [--processes 1 2]
                         [--turns-per-user 3] [--recall bm25 static hybrid] [--baseline [COMMIT]]
                         [--profile DIR] [--slack-defaults] [--json]
                         [--channels N [--channel-memory off on] [--entries 300] [--rounds 2]
                          [--team-every 10]]

Each run starts the fake Slack and the fake Anthropic server of the test suite, the real bot
as ``selfmind slack --http`` child process(es) on a fresh SQLite file (``synchronous`` from
``SELFMIND_SQLITE_SYNCHRONOUS``, default full) or a fresh PostgreSQL database made on the
server of ``SELFMIND_TEST_DATABASE_URL``, and N users who each send ``--turns-per-user`` DMs
one after another (the next once the answer is complete), all users at once. The fake answers
like a model: first token after 0.5 s, then 4 characters every 20 ms; reflection calls with
one memory a turn. With ``--processes 2`` (PostgreSQL only) the users are split between two
bot processes on the same database, as a load balancer would.

``--recall bm25 static hybrid`` runs the bots with each ``SELFMIND_RECALL`` in the same run
(``static`` the default, ``hybrid`` needs the semantic extra); the fake's reflection proposes
one memory a turn for each, so the embedding recalls embed each memory and each query on the
bot's CPU.

``--slack-defaults`` runs the bots with their own edit interval and edit budget (1 s, 50
``chat.update`` a minute per workspace: Slack's tier 3) instead of the bench's 50 ms and no
budget: what a burst costs when the budget, not the CPU, is the limit (use
``--turns-per-user 1``: a baseline that waits minutes for its final edits takes long).

``--channels N`` (channel mode): instead of DMs, each user mentions the bot
(``app_mention``) in a thread of its own in one of N busy public channels (user ``u`` in
channel ``u % N``), ``--turns-per-user`` mentions one after another in that thread. Each
channel holds ``--entries`` team entries from the start (seeded through the store before the
bot starts, each with who said it). ``--channel-memory off on`` runs the same burst with the
channels' memory off (the entries kept, unused) and on (every answer reads the channel's
block and recalls over its entries; every reflection asks for team entries, and the fake
returns one in one reflection of ``--team-every``: most exchanges settle nothing),
alternated ``--rounds`` times in one run, each on a fresh store; the summary prints the
median CPU a turn of each and on/off (the issue's target: within 1.15x).

``--baseline`` runs the same harness against another commit (default: ``git merge-base HEAD
main``, the commit this branch started from) checked out with ``git worktree`` into a
temporary folder, in the same run, and prints both tables.

Columns: ``ack`` the time from sending an event to the bot's HTTP 200 (Slack wants 3 s);
``overhead`` the time from sending to the final answer edit less the fake's own answer time
(0.5 s + streaming); ``first`` the time to the first answer text on Slack less the fake's
0.5 s; ``cpu/turn`` the bot processes' user+system CPU (``/proc/PID/stat``) from just before
the burst until the reflections are done, per turn; ``rss MB`` the bot process's peak resident
memory (``VmHWM`` of ``/proc/PID/status``, the largest of the processes) at the end of the
burst; ``tx/turn`` committed transactions
(PostgreSQL ``pg_stat_database.xact_commit`` of the run's database); ``fsync/turn``
``fdatasync`` calls (SQLite, counted with ``strace -f -c``; ``-`` when strace is absent or
with ``--profile``) or WAL
syncs (PostgreSQL ``pg_stat_wal.wal_sync``, server-wide: other clients of the server count
too); ``errors`` refused events, unanswered turns and ERROR lines in the bot's log; ``once``
turns answered exactly once, ``twice`` more than once. The fake's Slack rate limits are off
for ``chat.update`` and ``chat.postMessage`` (only the streaming methods have tiers, and they
are not used): the header line says so, and ``429s`` counts any the fake answered. Answers are
pinned to message edits (``SELFMIND_SLACK_STREAMING=edits``; native streaming is for threads)
with the bot's edit throttle at 50 ms: ``throttle`` is the answers' edit-throttle wait (the
edits a turn made times the interval, an upper bound), reported apart and not subtracted from
``overhead``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baseline import baseline_tree, merge_base
from bench.replay_locomo import (
    _TALKING_WITH,
    DEFAULT_EDIT_INTERVAL_S,
    DEFAULT_UPDATES_PER_MINUTE,
    EDIT_INTERVAL_S,
    BotProcess,
    count_log_errors,
    peak_rss_mb,
)
from bots.slack_bot.events import DM_NOTICE
from tests.fakes.anthropic_server import Reply, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack

_SPEAKER = re.compile(r"You are talking with <@([A-Z0-9]+)>")
"""The speaker's line in a channel (a shared place: the label unquoted)."""
REPO = Path(__file__).resolve().parent.parent
FIRST_TOKEN_S = 0.5
CHUNK_CHARS, CHUNK_DELAY_S = 4, 0.02
CLK_TCK = os.sysconf("SC_CLK_TCK")
_RUNS = itertools.count()
"""Numbers each run's profile file (``--profile``): the rounds of channel mode each their own."""
WORDS = (
    "what did we decide about the release plan for next week and who owns the migration "
    "remind me of my favourite tea and the name of my dog please keep it short thanks"
).split()

SEED = """
import asyncio, sys
from datetime import UTC, datetime, timedelta
from core.runtime import open_store
from core.types import Attribution, NewMemory, Place

url, team, words = sys.argv[1], sys.argv[2], sys.argv[6].split()
channels, entries, on = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "on"

async def main():
    store = await open_store(url, migrate=True)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        for n in range(channels):
            place = Place(
                platform="slack", kind="public_channel", workspace=team, channel=f"CBUSY{n}"
            )
            key = place.channel_key
            await store.see_channel(place=place)
            await store.set_channel_memory(channel_key=key, on=on, by="bench", at=start)
            rule = lambda i: " ".join(words[(i * 5 + j) % len(words)] for j in range(6))
            memories = [
                NewMemory(text=f"The team agreed {rule(i)} rule {i}.", origin="shared",
                          created_at=start + timedelta(minutes=i))
                for i in range(entries)
            ]
            results = await store.add_many(user_key=key, memories=memories, dedupe=None)
            await store.attribute(channel_key=key, entries=[
                Attribution(
                    memory_id=r.id, said_at=start, said_by=f"slack:{team}:U0", said_by_name="A"
                )
                for r in results
            ])
    finally:
        await store.close()

asyncio.run(main())
"""
"""Seeds the busy channels of ``--channels`` through the store of the tree under test (run
with its ``PYTHONPATH``, so a ``--baseline`` tree seeds with its own schema; the tree needs
team memory)."""


async def seed_channels(
    repo: Path, url: str, team: str, channels: int, entries: int, *, on: bool
) -> None:
    """``channels`` public channels ``CBUSY0``.. of workspace ``team``, each with ``entries``
    team entries (said by ``U0``), their memory on or off, in the store at ``url``."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    args = [url, team, str(channels), str(entries), "on" if on else "off", " ".join(WORDS)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SEED, *args, cwd=repo, env=env
    )
    if await proc.wait():
        raise RuntimeError(f"seeding the channels failed ({proc.returncode})")


def answer_for(tag: str) -> str:
    return f"Answer {tag}: fine, noted and done."


def model_time_s(tag: str) -> float:
    chunks = -(-len(answer_for(tag)) // CHUNK_CHARS)
    return FIRST_TOKEN_S + chunks * CHUNK_DELAY_S


@dataclass
class Run:
    acks: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def bot_pid(bot: BotProcess, traced: bool) -> int:
    assert bot.proc is not None
    if not traced:
        return bot.proc.pid
    for _ in range(100):
        with contextlib.suppress(OSError):
            kids = Path(f"/proc/{bot.proc.pid}/task/{bot.proc.pid}/children").read_text().split()
            if kids:
                return int(kids[0])
        time.sleep(0.05)
    raise RuntimeError("strace started no bot")


async def pg_value(url: str, sql: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(sql) or 0)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_postgres(server_url: str) -> Any:
    import asyncpg

    name = f"selfmind_load_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(server_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = server_url.rpartition("/")
    try:
        yield f"{base}/{name}", name
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def reflections_done(db: Path, url: str | None) -> bool:
    sql = "SELECT COUNT(*) FROM turns WHERE reflection IN ('answering', 'pending')"
    if url:
        return await pg_value(url, sql) == 0
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute(sql).fetchone()[0]) == 0


async def poll(check: Callable[[], bool], timeout_s: float = 300) -> None:
    async def wrapped() -> bool:
        return check()

    await poll_async(wrapped, timeout_s)


async def poll_async(check: Callable[[], Awaitable[bool]], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"not done within {timeout_s} s")


def finals_of(slack: FakeSlack, channel: str, tag: str) -> int:
    """How many of the bot's messages in ``channel`` hold the whole answer to ``tag``."""
    full = answer_for(tag)
    return sum(
        1
        for m in slack.messages(channel)
        if full in str(m.get("markdown_text") or m.get("text") or "")
    )


def answer_writes(slack: FakeSlack) -> dict[str, list[tuple[float, str]]]:
    """Per channel, the time and text of each of the bot's posts and edits."""
    out: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for c in slack.recorded:
        if c.method in ("chat.postMessage", "chat.update"):
            text = str(c.params.get("markdown_text") or c.params.get("text") or "")
            out[str(c.params.get("channel"))].append((c.at, text))
    return out


def shows_answer(tag: str, text: str) -> bool:
    """Whether ``text`` shows the answer to ``tag`` or the start of it (after a first DM's
    privacy line, before the writing marker's line)."""
    body = text.removeprefix(DM_NOTICE).split("\n", 1)[0]
    return bool(body) and answer_for(tag).startswith(body)


async def one_config(
    *,
    users: int,
    backend: str,
    processes: int,
    turns: int,
    repo: Path,
    label: str,
    recall: str = "bm25",
    profile: str | None = None,
    slack_defaults: bool = False,
    channels: int = 0,
    channel_memory: str = "off",
    entries: int = 300,
    team_every: int = 10,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="selfmind-load-"))
    db = workdir / "load.db"
    strace = shutil.which("strace") if backend == "sqlite" and not profile else None
    interval_s = DEFAULT_EDIT_INTERVAL_S if slack_defaults else EDIT_INTERVAL_S
    run = Run()
    current: dict[str, str] = {}

    learned = itertools.count()

    def respond(body: dict[str, Any]) -> Any:
        if body.get("output_config"):
            # One memory a turn, whatever the recall (the same work for each): embedding
            # recalls have vectors to search and embed each.
            i = next(learned)
            words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6))
            memory = {"text": f"The user noted {words} ({i}).", "kind": "context"}
            memory |= {"category": "general", "supersedes": []}
            out: dict[str, Any] = {"memories": [memory]}
            schema = (body["output_config"].get("format") or {}).get("schema") or {}
            if "team" in (schema.get("properties") or {}) and i % team_every == 0:
                team = {"text": f"The team settled {words} ({i}).", "kind": "fact"}
                out["team"] = [team | {"category": "workflow"}]
            return Reply(text=json.dumps(out))
        system = body.get("system") or []
        volatile = system[-1]["text"] if len(system) > 1 else ""  # after the profile
        speaker = _TALKING_WITH.search(volatile) or _SPEAKER.search(volatile)
        return Reply(text=answer_for(current.get(speaker.group(1), "?") if speaker else "?"))

    async with contextlib.AsyncExitStack() as stack:
        url: str | None = None
        if backend == "postgres":
            server = os.environ.get("SELFMIND_TEST_DATABASE_URL")
            if not server:
                raise SystemExit("postgres needs SELFMIND_TEST_DATABASE_URL")
            url, dbname = await stack.enter_async_context(fresh_postgres(server))
        slack = await stack.enter_async_context(running_fake_slack())
        if channels:
            await seed_channels(
                repo, url or f"sqlite:///{db}", slack.identity.team_id, channels, entries,
                on=channel_memory == "on",
            )  # fmt: skip
        claude = await stack.enter_async_context(
            running_fake_anthropic(
                responder=respond,
                first_token_delay_s=FIRST_TOKEN_S,
                chunk_size=CHUNK_CHARS,
                chunk_delay_s=CHUNK_DELAY_S,
            )
        )
        bots, pids = [], []
        tail = f"-memory-{channel_memory}-{next(_RUNS)}" if channels else ""
        for p in range(processes):
            out = str(workdir / f"st{p}")
            trace = [strace, "-f", "--seccomp-bpf", "-c", "-e", "trace=fdatasync", "-o", out]
            if profile:
                raw = f"{profile}/{label}-{recall}-{backend}-{users}-{p}{tail}.txt"
                # --gil: only the thread that runs Python (idle waits are not CPU)
                trace = ["py-spy", "record", "--gil", "-r", "250", "-f", "raw", "-o", raw, "--"]
            bot = BotProcess(
                db,
                slack,
                claude,
                workdir / f"bot{p}.log",
                db_url=url,
                repo=repo,
                wrap=trace if strace or profile else None,
                slack_defaults=slack_defaults,
            )
            # The bot's environment is this process's (BotProcess copies SELFMIND_*).
            os.environ.update(SELFMIND_SLACK_STREAMING="edits", SELFMIND_RECALL=recall)
            await bot.start()
            bots.append(bot)
            pids.append(bot_pid(bot, bool(strace or profile)))
        # Warm-up turns per process (first imports, first connections), not measured; the
        # second recalls the memory the first left, so hybrid's model is loaded before.
        for w in range(2):
            for p, bot in enumerate(bots):
                user = f"UWARM{p}"
                current[user] = f"W{p}x{w}"
                event = slack.events.message("hello, remember my tea", user=user)
                await slack.send_event(bot.url, event)
            await poll(
                lambda w=w: all(  # type: ignore[misc]
                    finals_of(slack, slack.events.dm_channel(f"UWARM{p}"), f"W{p}x{w}")
                    for p in range(processes)
                )
            )
            await poll_async(lambda: reflections_done(db, url))

        cpu0 = sum(cpu_s(pid) for pid in pids)
        wal0 = await pg_value(url, "SELECT wal_sync FROM pg_stat_wal") if url else 0
        tx_sql = (
            f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{dbname}'" if url else ""
        )
        tx0 = await pg_value(url, tx_sql) if url else 0
        edits0 = len(slack.calls("chat.update"))
        calls0 = len(slack.calls())
        start = time.monotonic()
        sent: list[tuple[str, str, str, float]] = []

        def where(u: int) -> str:
            return f"CBUSY{u % channels}" if channels else slack.events.dm_channel(f"ULOAD{u:04d}")

        async def one_user(u: int) -> None:
            user = f"ULOAD{u:04d}"
            channel = where(u)
            root = slack.events.next_ts()  # the user's own thread in a busy channel
            bot = bots[u % processes]
            for k in range(turns):
                tag = f"L{u}x{k}"
                current[user] = tag
                words = [WORDS[(u * 31 + k * 7 + i) % len(WORDS)] for i in range(12)]
                if channels:
                    text = f"{slack.identity.mention} {' '.join(words)}"
                    event = slack.events.app_mention(
                        text, user=user, channel=channel, thread_ts=root
                    )
                else:
                    event = slack.events.message(" ".join(words), user=user)
                t0 = time.monotonic()
                try:
                    response = await slack.send_event(bot.url, event, event_id=f"Ev{u}x{k}")
                except OSError as exc:
                    run.reasons[f"event failed: {type(exc).__name__}"] += 1
                    continue
                run.acks.append((time.monotonic() - t0) * 1000)
                if response.status != 200:
                    run.reasons[f"event answered HTTP {response.status}"] += 1
                    continue
                deadline = t0 + (300 if slack_defaults else 120)
                while not finals_of(slack, channel, tag):
                    if time.monotonic() > deadline:
                        run.reasons["turn not answered in time"] += 1
                        break
                    await asyncio.sleep(0.02)
                else:
                    sent.append((channel, user, tag, t0))

        await asyncio.gather(*(one_user(u) for u in range(users)))
        answered_s = time.monotonic() - start
        await poll_async(lambda: reflections_done(db, url))
        cpu = sum(cpu_s(pid) for pid in pids) - cpu0
        tx = (await pg_value(url, tx_sql) - tx0) if url else None
        wal = (await pg_value(url, "SELECT wal_sync FROM pg_stat_wal") - wal0) if url else None
        edits = len(slack.calls("chat.update")) - edits0
        writes = answer_writes(slack)
        for channel, user, tag, t0 in sent:
            # This turn's writes: after its event, before the user's next one, showing its
            # answer (a previous answer's final edit may come after this turn's event).
            nxt = [t1 for _, who, _, t1 in sent if who == user and t1 > t0]
            mine = [
                at
                for at, text in writes[channel]
                if at >= t0 and (not nxt or at < min(nxt)) and shows_answer(tag, text)
            ]
            if not mine:
                continue
            run.overheads.append((max(mine) - t0 - model_time_s(tag)) * 1000)
            run.firsts.append((min(mine) - t0 - FIRST_TOKEN_S) * 1000)
        once = twice = 0
        for u in range(users):
            for k in range(turns):
                finals = finals_of(slack, where(u), f"L{u}x{k}")
                once += finals == 1
                twice += finals > 1
        peak_mb = max(peak_rss_mb(pid) for pid in pids)
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for bot in bots:
            assert bot.proc is not None
            await asyncio.wait_for(bot.proc.wait(), 60)
        ratelimited = sum(1 for c in slack.calls() if c.status == 429)
        by_method = Counter(c.method for c in slack.calls()[calls0:])
    fsyncs = None
    if strace:
        fsyncs = 0
        for p in range(processes):
            for line in (workdir / f"st{p}").read_text().splitlines():
                if line.strip().endswith("fdatasync"):
                    fsyncs += int(line.split()[3])
        # The warm-up turn and start-up are in the strace count: at most a few syncs.
    elif wal is not None:
        fsyncs = wal
    n = users * turns
    errors = sum(run.reasons.values()) + sum(
        count_log_errors(workdir / f"bot{p}.log") for p in range(processes)
    )
    if run.reasons:
        print(f"{label}: {dict(run.reasons)}", file=sys.stderr)
    per_turn = ", ".join(f"{m} {k / (users * turns):.2f}" for m, k in by_method.most_common())
    print(f"{label}: Slack Web API calls per turn: {per_turn}", file=sys.stderr)
    shutil.rmtree(workdir, ignore_errors=True)
    return {
        "code": label,
        "users": users,
        "store": backend if backend == "postgres" else f"sqlite/{synchronous()}",
        "procs": processes,
        "recall": recall,
        "memory": channel_memory if channels else "-",
        "ack_p50": pct(run.acks, 0.5),
        "ack_p95": pct(run.acks, 0.95),
        "ack_max": max(run.acks, default=float("nan")),
        "ovh_p50": pct(run.overheads, 0.5),
        "ovh_p95": pct(run.overheads, 0.95),
        "first_p50": pct(run.firsts, 0.5),
        "first_p95": pct(run.firsts, 0.95),
        "cpu_ms_turn": cpu * 1000 / n,
        "peak_rss_mb": peak_mb,
        "tx_turn": None if tx is None else tx / n,
        "fsync_turn": None if fsyncs is None else fsyncs / n,
        "throttle_ms_turn": edits * interval_s * 1000 / n,
        "turns_per_s": n / answered_s,
        "slack_calls_turn": sum(by_method.values()) / n,
        "errors": errors,
        "once": once,
        "twice": twice,
        "turns": n,
        "slack_429s": ratelimited,
    }


def synchronous() -> str:
    return os.environ.get("SELFMIND_SQLITE_SYNCHRONOUS", "") or "full"


COLS = [
    ("code", "{}", 9),
    ("users", "{}", 6),
    ("store", "{}", 13),
    ("procs", "{}", 6),
    ("recall", "{}", 7),
    ("memory", "{}", 7),
    ("ack_p50", "{:.0f}", 8),
    ("ack_p95", "{:.0f}", 8),
    ("ack_max", "{:.0f}", 8),
    ("ovh_p50", "{:.0f}", 8),
    ("ovh_p95", "{:.0f}", 8),
    ("first_p50", "{:.0f}", 10),
    ("first_p95", "{:.0f}", 10),
    ("cpu_ms_turn", "{:.1f}", 12),
    ("peak_rss_mb", "{:.0f}", 9),
    ("tx_turn", "{:.1f}", 8),
    ("fsync_turn", "{:.1f}", 11),
    ("throttle_ms_turn", "{:.0f}", 9),
    ("slack_calls_turn", "{:.1f}", 7),
    ("turns_per_s", "{:.1f}", 8),
    ("errors", "{}", 7),
    ("once", "{}", 5),
    ("twice", "{}", 6),
    ("slack_429s", "{}", 6),
]
HEADS = {
    "throttle_ms_turn": "throttle",
    "slack_calls_turn": "api/t",
    "turns_per_s": "turns/s",
    "cpu_ms_turn": "cpu ms/turn",
    "peak_rss_mb": "rss MB",
    "fsync_turn": "fsync/turn",
    "tx_turn": "tx/turn",
    "slack_429s": "429s",
}


def print_rows(rows: list[dict[str, Any]]) -> None:
    print("".join(f"{HEADS.get(c, c):>{w}}" for c, _, w in COLS) + "   (times in ms)")
    for r in rows:
        cells = []
        for c, fmt, w in COLS:
            v = r[c]
            cells.append(f"{'-' if v is None else fmt.format(v):>{w}}")
        print("".join(cells))


MEMORY_TARGET = 1.15
"""Issue 35's bound on CPU a turn with the busy channels' memory on, over the same run off."""


def memory_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (code, users, store, procs, recall): the CPU a turn of each round
    with the channels' memory off and on, their medians, on/off and whether it is within
    :data:`MEMORY_TARGET`."""
    groups: dict[tuple[Any, ...], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = (r["code"], r["users"], r["store"], r["procs"], r["recall"])
        groups[key][r["memory"]].append(r["cpu_ms_turn"])
    out = []
    for key, by in groups.items():
        if by.get("off") and by.get("on"):
            off, on = statistics.median(by["off"]), statistics.median(by["on"])
            names = ("code", "users", "store", "procs", "recall")
            out.append(
                dict(zip(names, key, strict=True))
                | {"off": off, "on": on, "ratio": on / off, "passed": on / off <= MEMORY_TARGET}
                | {"offs": list(by["off"]), "ons": list(by["on"])}
            )
    return out


def print_memory_ratios(rows: list[dict[str, Any]]) -> None:
    for r in memory_ratios(rows):
        rounds = ", ".join(f"{v:.1f}" for v in r["offs"]), ", ".join(f"{v:.1f}" for v in r["ons"])
        verdict = "pass" if r["passed"] else "FAIL"
        print(
            f"{r['code']} {r['users']} users {r['store']} x{r['procs']} {r['recall']}: CPU a turn"
            f" off {rounds[0]} ms (median {r['off']:.1f}), on {rounds[1]} ms (median"
            f" {r['on']:.1f}): on/off {r['ratio']:.3f}x, {verdict} (target"
            f" {MEMORY_TARGET:.2f}x)"
        )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    if shutil.which("strace") is None:
        print("strace not found: fsyncs on SQLite not counted (apt-get install -y strace)")
    budget = (
        f"the bot's own defaults: edit interval {DEFAULT_EDIT_INTERVAL_S * 1000:.0f} ms, edit"
        f" budget {DEFAULT_UPDATES_PER_MINUTE} a minute per workspace"
        if args.slack_defaults
        else f"bot edit interval {EDIT_INTERVAL_S * 1000:.0f} ms, edit budget off"
    )
    print(
        "fake Slack rate limits: off for chat.update/chat.postMessage (streaming methods unused);"
        f" {budget} (throttle reported apart);"
        f" answers by message edits (SELFMIND_SLACK_STREAMING=edits);"
        f" {args.turns_per_user} turns per user"
    )
    trees: list[tuple[str, Path]] = [("this", REPO)]
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.baseline is not None:
            commit = args.baseline or merge_base()
            print(f"baseline: {commit[:12]} (git worktree)")
            trees.insert(0, ("base", stack.enter_context(baseline_tree(commit))))
        memories = args.channel_memory * args.rounds if args.channels else ["off"]
        for recall in args.recall:
            for backend in args.backends:
                for users in args.users:
                    for processes in args.processes if backend == "postgres" else [1]:
                        for label, tree in trees:
                            for memory in memories:
                                row = await one_config(
                                    users=users,
                                    backend=backend,
                                    processes=processes,
                                    turns=args.turns_per_user,
                                    repo=tree,
                                    label=label,
                                    recall=recall,
                                    profile=args.profile,
                                    slack_defaults=args.slack_defaults,
                                    channels=args.channels,
                                    channel_memory=memory,
                                    entries=args.entries,
                                    team_every=args.team_every,
                                )
                                rows.append(row)
                                print_rows([row])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[50, 200])
    parser.add_argument(
        "--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"]
    )
    parser.add_argument("--processes", type=int, nargs="+", default=[1])
    parser.add_argument("--turns-per-user", type=int, default=3)
    parser.add_argument(
        "--recall",
        nargs="+",
        default=["bm25"],
        choices=["bm25", "static", "hybrid"],
        help="SELFMIND_RECALL of the bots (static: the default; hybrid needs the semantic extra)",
    )
    parser.add_argument(
        "--baseline",
        nargs="?",
        const="",
        default=None,
        help="also run COMMIT (default: merge-base with main) from a git worktree",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="run each bot under py-spy (raw stacks into DIR) instead of strace",
    )
    parser.add_argument(
        "--slack-defaults",
        action="store_true",
        help="run the bots with their own edit interval (1 s) and edit budget (50 a minute)",
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=0,
        help="channel mode: users mention the bot in threads of N busy channels (0: DMs)",
    )
    parser.add_argument(
        "--channel-memory",
        nargs="+",
        default=["off", "on"],
        choices=["off", "on"],
        help="the busy channels' memory in each run (channel mode), alternated --rounds times",
    )
    parser.add_argument("--entries", type=int, default=300, help="team entries per channel")
    parser.add_argument("--rounds", type=int, default=2, help="channel mode: off/on rounds")
    parser.add_argument(
        "--team-every", type=int, default=10, help="one reflection in N returns a team entry"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = asyncio.run(main_async(args))
    print()
    print_rows(rows)
    if args.channels:
        print_memory_ratios(rows)
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
