"""Replay real long-term conversations through the running Slack bot, end to end.

    python bench/replay_locomo.py [--data DIR] [--conversations conv-26 ...] [--sessions N]
                                  [--seed N] [--restarts kill term ...] [--questions N]
                                  [--json] [--concurrent N]

For each LoCoMo conversation (``../shared/data/locomo``, CC BY-NC 4.0; never copied here):

1. the real bot runs as a separate process, ``selfmind slack --http``, on a fresh SQLite
   file, its ``SLACK_API_URL`` pointing at the fake Slack Web API and ``ANTHROPIC_BASE_URL``
   at the fake Anthropic server (both from the test suite, started here);
2. every session is replayed in order, each turn a signed ``message.im`` event from that
   speaker's Slack user (two users, each in a DM with the bot); the event ``ts`` is the
   session's date plus the turn's index in seconds; the request timestamp is now;
3. the fake answers chat calls with a short fixed reply naming the turn, and reflection calls
   as an oracle: LoCoMo's human-checked observations listed under the speaker that cite the
   turn, in the product's own schema (observations listed under one speaker that cite the
   other's turn are not offered: "not attributable");
4. the bot is restarted at random points mid-session on the same database (``--restarts``,
   default once with SIGTERM and once with SIGKILL; the points and the delay before each kill
   come from ``--seed``, so a run is repeatable); events sent while it is down are retried as
   Slack retries them (``X-Slack-Retry-Num``, compressed in time);
5. every question of categories 1-4 with evidence is then asked as a DM from the speaker it
   names first (speaker_a if none), and the memories the bot put into the system prompt are
   read from the request the fake received, in order.

Counts: ``answered`` turns got exactly one final answer, ``answered_twice`` more than one,
``interrupted`` none although the message is stored (in flight at the SIGKILL);
``oracle_memories`` offered by the oracle, ``stored`` of them found stored for the speaker,
``merged`` into a stored near-twin by dedupe, ``lost`` neither; ``cross_user`` memories stored
under the other speaker; ``hit@k`` a question whose first k recalled memories cite an evidence
turn; ``overhead_ms`` the time from the event to the final answer edit, less the edit throttle
and the fake's own answer time; ``errors`` bot log lines at ERROR, tracebacks, refused events,
events never acknowledged within Slack's retries, and timeouts.

``--concurrent N``: N synthetic users send speakers' turns at the same time through one bot,
the fake answering like a real model (first token after 0.5 s, then 50 tokens/s); reports
the bot's overhead per turn (p50/p95/max), its peak RSS and errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.locomo import DEFAULT_DATA, REPO_ROOT, Conversation, load_all
from core.rules.dedupe import Deduper
from core.rules.text import normalize
from core.settings import Settings
from core.types import Memory, utcnow
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack

API_KEY = "sk-ant-replay"
EDIT_INTERVAL_S = 0.05
DEFAULT_EDIT_INTERVAL_S = float(Settings.model_fields["slack_edit_interval_s"].default)
DEFAULT_UPDATES_PER_MINUTE = int(Settings.model_fields["slack_updates_per_minute"].default)
"""The bot's own edit interval and budget (``slack_defaults``), as its settings define them."""
ANSWER_TIMEOUT_S = 30.0
SLACK_RETRY_DELAYS_S = (0.5, 6.0, 30.0)
"""Slack retries an unacknowledged event three times, nearly at once, after 1 minute and
after 5 minutes (https://docs.slack.dev/apis/events-api/#retries); compressed here tenfold.
The window (about 36 s) must outlast a restart of the bot on a loaded machine (20 s seen
with 2 cores shared by 8 runs): a shorter one drops the event sent while the bot is down,
which Slack would still have redelivered."""
_USER_LINE = re.compile(r'^user: (".*")$', re.M)
# The prompt names the speaker as JSON data, "<" and ">" escaped: "\u003c@U123\u003e".
_TALKING_WITH = re.compile(r'You are talking with "(?:<|\\u003c)@([A-Z0-9]+)(?:>|\\u003e)"')
_TIME = re.compile(r'message_time="([^"]+)"')


def reply_for(tag: str) -> str:
    return f"Noted ({tag})."


# ------------------------------------------------------------------------------ the oracle
@dataclass
class Oracle:
    """Answers the fake's reflection calls with LoCoMo's observations for the turn."""

    by_turn: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    observations: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)  # slack user -> tag being answered
    offered: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    prompts: dict[str, list[str]] = field(default_factory=dict)  # question tag -> memories
    texts: dict[str, str] = field(default_factory=dict)  # tag -> the text sent for it

    def respond(self, body: dict[str, Any]) -> Any:
        if body.get("output_config"):
            return self._reflect(body)
        system = body.get("system") or []
        volatile = system[1]["text"] if len(system) > 1 else ""
        messages = body.get("messages") or []
        last = messages[-1]["content"] if messages else ""
        last_text = last if isinstance(last, str) else "".join(b.get("text", "") for b in last)
        speaker = _TALKING_WITH.search(volatile)
        tag = self.current.get(speaker.group(1), "?") if speaker else self._tag_for(last_text)
        if tag.startswith("Q"):
            self.prompts[tag] = [
                json.loads(line)["text"]
                for line in volatile.splitlines()
                if line.startswith("{") and '"text"' in line
            ]
        return Reply(text=reply_for(tag))

    def _tag_for(self, text: str) -> str:
        # The bot strips and collapses what Slack sends, and joins consecutive user messages
        # (an unanswered one before this) into one: the current message ends the last one.
        wanted = " ".join(text.split())
        for tag in self.current.values():
            sent = " ".join(self.texts.get(tag, "").split())
            if sent and wanted.endswith(sent):
                return tag
        return "?"

    def _reflect(self, body: dict[str, Any]) -> str:
        content = body["messages"][0]["content"]
        prompt = content if isinstance(content, str) else content[0]["text"]
        user = _USER_LINE.search(prompt)
        when = _TIME.search(prompt)
        memories = []
        if user and when:
            key = (" ".join(json.loads(user.group(1)).split()), when.group(1))
            turn = self.by_turn.get(key)
            if turn is not None:
                for text in self.observations.get(turn, []):
                    self.offered[turn].add(text)
                    memories.append(
                        {"text": text, "kind": "fact", "category": "general", "supersedes": []}
                    )
        return json.dumps({"memories": memories})


def epoch(conv: Conversation, session_index: int) -> int:
    return int(conv.sessions[session_index].date.replace(tzinfo=UTC).timestamp())


def sent_iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ the bot
class BotProcess:
    """``selfmind slack --http`` as a child process."""

    def __init__(
        self,
        db: Path,
        slack: FakeSlack,
        claude: FakeAnthropic,
        log: Path,
        *,
        db_url: str | None = None,
        repo: Path = REPO_ROOT,
        wrap: list[str] | None = None,
        slack_defaults: bool = False,
    ) -> None:
        self.db, self.slack, self.claude, self.log = db, slack, claude, log
        self.db_url, self.repo, self.wrap = db_url, repo, wrap or []
        self.slack_defaults = slack_defaults  # the bot's own edit interval and budget
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    async def start(self) -> None:
        # SELFMIND_* settings from the caller reach the bot (SELFMIND_SQLITE_SYNCHRONOUS=normal,
        # a PostgreSQL SELFMIND_DB, ...); Slack credentials and the database are the fakes'.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
        env.update(
            PYTHONPATH=str(self.repo),
            SELFMIND_DB=self.db_url or str(self.db),
            SLACK_BOT_TOKEN=self.slack.bot_token,
            SLACK_SIGNING_SECRET=self.slack.signing_secret,
            SLACK_API_URL=self.slack.api_url,
            ANTHROPIC_API_KEY=API_KEY,
            ANTHROPIC_BASE_URL=self.claude.base_url,
            SELFMIND_SLACK_EDIT_INTERVAL_S=str(EDIT_INTERVAL_S),
            SELFMIND_SLACK_UPDATES_PER_MINUTE="1000000",
            SELFMIND_LOG_LEVEL="INFO",
        )
        if self.slack_defaults:
            env["SELFMIND_SLACK_EDIT_INTERVAL_S"] = str(DEFAULT_EDIT_INTERVAL_S)
            env["SELFMIND_SLACK_UPDATES_PER_MINUTE"] = str(DEFAULT_UPDATES_PER_MINUTE)
        out = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.wrap,
            sys.executable,
            "-m",
            "bots.cli",
            "slack",
            "--http",
            "--port",
            str(self.port),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=self.db.parent,
            env=env,
        )
        out.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise RuntimeError(f"bot exited with {self.proc.returncode}; see {self.log}")
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                await writer.wait_closed()
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("bot did not start listening within 60 s")

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), timeout_s)

    def peak_rss_mb(self) -> float:
        assert self.proc is not None
        return peak_rss_mb(self.proc.pid)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (``VmHWM`` of ``/proc/PID/status``) in MB; 0 when
    it is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------ replay
restart_log: dict[str, list[str]] = {}
"""Per conversation, the turn indexes the bot was restarted at (and how), for the report."""


@dataclass
class Tally:
    turns_sent: int = 0
    answered: int = 0
    answered_twice: int = 0
    interrupted: int = 0
    oracle_memories: int = 0
    not_attributable: int = 0
    stored: int = 0
    merged: int = 0
    lost: int = 0
    cross_user: int = 0
    questions: int = 0
    hits1: int = 0
    hits6: int = 0
    overheads: list[float] = field(default_factory=list)
    errors: int = 0
    dropped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def error(self, reason: str) -> None:
        self.errors += 1
        self.reasons[reason] += 1

    def add(self, other: Tally) -> None:
        for name, value in vars(other).items():
            if isinstance(value, list):
                getattr(self, name).extend(value)
            elif isinstance(value, Counter):
                getattr(self, name).update(value)
            else:
                setattr(self, name, getattr(self, name) + value)

    def row(self) -> dict[str, Any]:
        o = sorted(self.overheads) or [0.0]
        return {
            "turns_sent": self.turns_sent,
            "answered": self.answered,
            "answered_twice": self.answered_twice,
            "interrupted": self.interrupted,
            "oracle_memories": self.oracle_memories,
            "not_attributable": self.not_attributable,
            "stored": self.stored,
            "merged": self.merged,
            "lost": self.lost,
            "cross_user": self.cross_user,
            "hit@1": round(self.hits1 / self.questions, 3) if self.questions else 0.0,
            "hit@6": round(self.hits6 / self.questions, 3) if self.questions else 0.0,
            "overhead_ms_p50": round(statistics.median(o), 1),
            "overhead_ms_p95": round(o[min(len(o) - 1, round(0.95 * (len(o) - 1)))], 1),
            "errors": self.errors,
        }


def slack_user(conv: Conversation, speaker: str) -> str:
    return f"U{conv.name.replace('-', '').upper()}{'A' if speaker == conv.speaker_a else 'B'}"


def turns_of(conv: Conversation, sessions: int | None) -> Iterator[tuple[int, int, Any]]:
    for s_index, session in enumerate(conv.sessions[: sessions or None]):
        for t_index, turn in enumerate(session.turns):
            yield s_index, t_index, turn


async def send_with_retries(
    slack: FakeSlack, bot: BotProcess, event: dict[str, Any], event_id: str, tally: Tally
) -> bool:
    """Deliver like Slack (:meth:`FakeSlack.deliver_event`): an attempt refused a connection,
    not answered within Slack's 3 s or answered non-2xx is sent again after each of
    :data:`SLACK_RETRY_DELAYS_S`, with ``X-Slack-Retry-Num`` and ``X-Slack-Retry-Reason``.
    Returns False when every attempt failed (Slack gives up too: counted as an error)."""
    statuses = await slack.deliver_event(
        bot.url, event, event_id=event_id, retry_delays_s=SLACK_RETRY_DELAYS_S
    )
    for status in statuses:
        if status > 0 and not 200 <= status < 300:
            tally.error(f"event answered HTTP {status}")
    if statuses and 200 <= statuses[-1] < 300:
        return True
    tally.dropped += 1
    tally.error("event never acknowledged in Slack's retries")
    return False


def final_answers(slack: FakeSlack, channel: str, tag: str) -> int:
    """Bot messages in ``channel`` carrying the whole answer to ``tag``. A message whose final
    edit a SIGKILL prevented still counts: its text arrived; only the "still writing" marker
    stayed."""
    needle = reply_for(tag)
    return sum(
        1
        for m in slack.messages(channel)
        if (m.get("bot_id") or m.get("user") == slack.identity.user_id)
        and needle in str(m.get("markdown_text") or m.get("text") or "")
    )


async def wait_answer(slack: FakeSlack, channel: str, tag: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if final_answers(slack, channel, tag):
            return True
        await asyncio.sleep(0.01)
    return False


async def replay_conversation(
    conv: Conversation, args: argparse.Namespace, workdir: Path, rng: random.Random
) -> Tally:
    tally = Tally()
    oracle = Oracle()
    speakers = (conv.speaker_a, conv.speaker_b)
    users = {s: slack_user(conv, s) for s in speakers}
    turns = list(turns_of(conv, args.sessions))
    # The oracle's index: (text, time) -> (speaker, dia_id), and what to offer per turn.
    session_numbers = {s.number for s in conv.sessions[: args.sessions or None]}
    for s_index, t_index, turn in turns:
        ts = epoch(conv, s_index) + t_index
        oracle.by_turn[(" ".join(turn.text.split()), sent_iso(ts))] = (turn.speaker, turn.dia_id)
    owner = {t.dia_id: t.speaker for _, _, t in turns}
    for number in session_numbers:
        for obs in conv.observations.get(number, []):
            for dia in obs.evidence:
                if dia not in owner:
                    continue
                if owner[dia] == obs.speaker:
                    bucket = oracle.observations.setdefault((obs.speaker, dia), [])
                    if obs.text not in bucket:
                        bucket.append(obs.text)
                else:
                    tally.not_attributable += 1

    db = workdir / f"{conv.name}.db"
    log = workdir / f"{conv.name}.log"
    async with (
        running_fake_slack() as slack,
        running_fake_anthropic(responder=oracle.respond) as claude,
    ):
        bot = BotProcess(db, slack, claude, log)
        await bot.start()
        # Restarts at random points mid-session (default: one SIGTERM, then one SIGKILL).
        wanted = [signal.SIGTERM if r == "term" else signal.SIGKILL for r in args.restarts]
        points = (
            sorted(rng.sample(range(2, len(turns) - 1), len(wanted)))
            if len(turns) > len(wanted) + 3
            else []
        )
        kinds = dict(zip(points, wanted, strict=False))
        restart_log[conv.name] = [f"{i}:{signal.Signals(k).name}" for i, k in kinds.items()]
        counts: Counter[str] = Counter()
        undelivered: set[str] = set()  # never acknowledged: already counted as an error
        for index, (s_index, t_index, turn) in enumerate(turns):
            ts = epoch(conv, s_index) + t_index
            user = users[turn.speaker]
            channel = slack.events.dm_channel(user)
            tag = turn.dia_id
            oracle.current[user] = tag
            oracle.texts[tag] = turn.text
            event = slack.events.message(turn.text, user=user, ts=f"{ts}.000000")
            event_id = f"Ev{conv.name}{index:05d}"
            sig = kinds.get(index)
            if sig == signal.SIGKILL:
                # Killed right after the event is accepted: this turn is in flight.
                delivered = await send_with_retries(slack, bot, event, event_id, tally)
                await asyncio.sleep(rng.uniform(0.0, 0.05))
                await bot.stop(signal.SIGKILL)
                restart = asyncio.create_task(bot.start())
                await asyncio.sleep(0.2)
            elif sig == signal.SIGTERM:
                await bot.stop(signal.SIGTERM)
                restart = asyncio.create_task(bot.start())
                # Retried as Slack retries it until the new process acknowledges it.
                delivered = await send_with_retries(slack, bot, event, event_id, tally)
            else:
                restart = None
                t0 = time.perf_counter()
                delivered = await send_with_retries(slack, bot, event, event_id, tally)
            if not delivered:
                undelivered.add(tag)
            if restart is not None:
                await restart
                t0 = time.perf_counter()
            tally.turns_sent += 1
            ok = await wait_answer(slack, channel, tag, ANSWER_TIMEOUT_S if not sig else 5.0)
            if ok and not sig:
                tally.overheads.append((time.perf_counter() - t0 - EDIT_INTERVAL_S) * 1000)
            counts[tag] = final_answers(slack, channel, tag) if ok else 0
        await wait_reflections(db)
        # Late duplicates would show now.
        for _, _, turn in turns:
            channel = slack.events.dm_channel(users[turn.speaker])
            n = final_answers(slack, channel, turn.dia_id)
            if n == 1:
                tally.answered += 1
            elif n > 1:
                tally.answered += 1
                tally.answered_twice += 1
            elif stored_user_turn(db, f"{epoch_of(conv, turn.dia_id, turns)}.000000"):
                tally.interrupted += 1
            elif turn.dia_id not in undelivered:
                tally.error("turn neither answered nor stored")
        # Questions.
        for q_index, question in enumerate(conv.questions[: args.questions]):
            speaker = named_speaker(question.text, speakers)
            user = users[speaker]
            tag = f"Q{q_index}"
            oracle.current[user] = tag
            oracle.texts[tag] = question.text
            event = slack.events.message(question.text, user=user)
            await send_with_retries(slack, bot, event, f"Ev{conv.name}Q{q_index:04d}", tally)
            if not await wait_answer(slack, slack.events.dm_channel(user), tag, ANSWER_TIMEOUT_S):
                tally.error("question not answered in time")
                print(f"unanswered {tag}: {question.text!r}", file=sys.stderr)
                continue
            recalled = oracle.prompts.get(tag, [])
            evidence_of = evidence_index(conv, speaker)
            cited = [
                bool(evidence_of.get(normalize(t), set()) & question.evidence) for t in recalled
            ]
            tally.questions += 1
            tally.hits1 += any(cited[:1])
            tally.hits6 += any(cited[:6])
        await wait_reflections(db)
        code = await bot.stop(signal.SIGTERM)
        if code != 0:
            tally.error(f"bot exited {code} on SIGTERM")
        missing = usage_missing(db, claude)
        # A call cut by a SIGKILL was made (and billed) but never recorded: at most the
        # answer and the reflection in flight at that moment, for each SIGKILL.
        kills = sum(1 for k in kinds.values() if k == signal.SIGKILL)
        if not 0 <= missing <= 2 * kills:
            tally.error(f"usage table misses {missing} of the fake's calls")
    for _ in range(count_log_errors(log)):
        tally.error(f"ERROR or traceback in {log.name}")
    account_memories(db, conv, users, oracle, tally)
    return tally


def epoch_of(conv: Conversation, dia_id: str, turns: list[tuple[int, int, Any]]) -> int:
    for s_index, t_index, turn in turns:
        if turn.dia_id == dia_id:
            return epoch(conv, s_index) + t_index
    raise KeyError(dia_id)


def named_speaker(question: str, speakers: tuple[str, str]) -> str:
    found = [(question.find(s), s) for s in speakers if s in question]
    return min(found)[1] if found else speakers[0]


def evidence_index(conv: Conversation, speaker: str) -> dict[str, set[str]]:
    index: dict[str, set[str]] = defaultdict(set)
    for obs in conv.all_observations():
        if obs.speaker == speaker:
            index[normalize(obs.text)] |= set(obs.evidence)
    return index


def stored_user_turn(db: Path, ts: str) -> bool:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM turns WHERE role = 'user' AND platform_ref = ?", (ts,)
        ).fetchone()
    return row is not None


async def wait_reflections(db: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (pending,) = conn.execute(
                "SELECT COUNT(*) FROM turns WHERE reflection IN ('answering', 'pending')"
            ).fetchone()
        if pending == 0:
            return
        await asyncio.sleep(0.1)


def usage_missing(db: Path, claude: FakeAnthropic) -> int:
    """How many of the calls the fake answered are missing from the bot's usage table."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (recorded,) = conn.execute("SELECT COUNT(*) FROM usage").fetchone()
    return int(claude.totals.requests) - int(recorded)


def count_log_errors(log: Path) -> int:
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(1 for line in text.splitlines() if " ERROR " in line or "Traceback" in line)


def account_memories(
    db: Path, conv: Conversation, users: dict[str, str], oracle: Oracle, tally: Tally
) -> None:
    team = "T0SELFMIND"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT u.user_key, m.text FROM memories m JOIN users u ON u.uid = m.uid"
            " WHERE m.superseded_by IS NULL"
        ).fetchall()
    stored: dict[str, list[str]] = defaultdict(list)
    for key, text in rows:
        stored[key].append(text)
    dedupe = Deduper(0.7)
    now = utcnow()
    for speaker, user in users.items():
        key = f"slack:{team}:{user}"
        mine = stored.get(key, [])
        norms = {normalize(t) for t in mine}
        known = [
            Memory(i, key, t, "fact", "general", "reflection", "private", now, now)
            for i, t in enumerate(mine)
        ]
        offered = {t for (s, _), texts in oracle.offered.items() if s == speaker for t in texts}
        tally.oracle_memories += len(offered)
        for text in offered:
            if normalize(text) in norms:
                tally.stored += 1
            elif dedupe.match(text, known) is not None:
                tally.merged += 1
            else:
                tally.lost += 1
        other = next(s for s in users if s != speaker)
        theirs = {normalize(o.text) for o in conv.all_observations() if o.speaker == other}
        own = {normalize(o.text) for o in conv.all_observations() if o.speaker == speaker}
        tally.cross_user += sum(1 for t in mine if normalize(t) in theirs - own)


# ------------------------------------------------------------------------------ load mode
async def load_mode(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    convs = load_all(Path(args.data), args.conversations)
    lines = [t.text for c in convs for s in c.sessions for t in s.turns if t.text.strip()]
    oracle = Oracle()
    tally = Tally()
    db = workdir / "load.db"
    log = workdir / "load.log"
    async with (
        running_fake_slack() as slack,
        running_fake_anthropic(
            responder=oracle.respond, first_token_delay_s=0.5, chunk_size=4, chunk_delay_s=0.02
        ) as claude,
    ):
        bot = BotProcess(db, slack, claude, log)
        await bot.start()

        async def one_user(u: int) -> None:
            user = f"ULOAD{u:04d}"
            channel = slack.events.dm_channel(user)
            for k in range(args.turns_per_user):
                text = lines[(u * 7919 + k * 104729) % len(lines)]
                tag = f"L{u}-{k}"
                oracle.current[user] = tag
                oracle.texts[tag] = text
                event = slack.events.message(text, user=user)
                t0 = time.perf_counter()
                await send_with_retries(slack, bot, event, f"EvL{u}x{k}", tally)
                tally.turns_sent += 1
                if await wait_answer(slack, channel, tag, 120):
                    model_s = 0.5 + len(reply_for(tag)) / 4 * 0.02 / 1
                    tally.overheads.append((time.perf_counter() - t0 - model_s) * 1000)
                    tally.answered += 1
                else:
                    tally.error("load turn not answered in time")

        await asyncio.gather(*(one_user(u) for u in range(args.concurrent)))
        await wait_reflections(db)
        rss = bot.peak_rss_mb()
        await bot.stop(signal.SIGTERM)
    for _ in range(count_log_errors(log)):
        tally.error(f"ERROR or traceback in {log.name}")
    if tally.reasons or tally.dropped:
        print(f"load errors: {dict(tally.reasons)} dropped={tally.dropped}", file=sys.stderr)
    o = sorted(tally.overheads) or [0.0]
    return {
        "concurrent": args.concurrent,
        "turns": tally.turns_sent,
        "answered": tally.answered,
        "overhead_ms_p50": round(statistics.median(o), 1),
        "overhead_ms_p95": round(o[min(len(o) - 1, round(0.95 * (len(o) - 1)))], 1),
        "overhead_ms_max": round(o[-1], 1),
        "peak_rss_mb": round(rss, 1),
        "errors": tally.errors,
    }


# ------------------------------------------------------------------------------ main
async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="selfmind-replay-"))
    if args.concurrent:
        return {"load": await load_mode(args, workdir)}
    rng = random.Random(args.seed)
    restart_log.clear()
    per: dict[str, dict[str, Any]] = {}
    total = Tally()
    for conv in load_all(Path(args.data), args.conversations):
        tally = await replay_conversation(conv, args, workdir, rng)
        per[conv.name] = tally.row()
        total.add(tally)
        if tally.reasons:
            print(f"{conv.name} errors: {dict(tally.reasons)}", file=sys.stderr)
    return {
        "conversations": per,
        "total": total.row(),
        "seed": args.seed,
        "restart_points": restart_log,
        "workdir": str(workdir),
    }


COLUMNS = [
    "turns_sent",
    "answered",
    "answered_twice",
    "interrupted",
    "oracle_memories",
    "not_attributable",
    "stored",
    "merged",
    "lost",
    "cross_user",
    "hit@1",
    "hit@6",
    "overhead_ms_p50",
    "overhead_ms_p95",
    "errors",
]


def print_table(result: dict[str, Any]) -> None:
    if "load" in result:
        r = result["load"]
        print("load: " + ", ".join(f"{k} {v}" for k, v in r.items()))
        return
    print(f"seed {result['seed']}, restarts at {result['restart_points']}")
    rows = {**result["conversations"], "total": result["total"]}
    short = [
        "turns",
        "answered",
        "twice",
        "interr.",
        "oracle",
        "n/attr",
        "stored",
        "merged",
        "lost",
        "x-user",
        "hit@1",
        "hit@6",
        "p50 ms",
        "p95 ms",
        "errors",
    ]
    print(f"{'':<9}" + "".join(f"{h:>9}" for h in short))
    for name, row in rows.items():
        print(f"{name:<9}" + "".join(f"{row[c]!s:>9}" for c in COLUMNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--conversations", nargs="*", default=None)
    parser.add_argument("--sessions", type=int, default=None, help="replay only the first N")
    parser.add_argument(
        "--seed", type=int, default=7, help="seeds the restart points and kill delays"
    )
    parser.add_argument(
        "--questions", type=int, default=None, help="ask only the first N questions (0: none)"
    )
    parser.add_argument(
        "--restarts",
        nargs="*",
        default=["term", "kill"],
        choices=["term", "kill"],
        help="restarts during each conversation, in order",
    )
    parser.add_argument("--concurrent", type=int, default=0, help="load mode with N users")
    parser.add_argument("--turns-per-user", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print_table(result)
    if args.json:
        total = result.get("total") or result["load"]
        print(json.dumps({"seed": args.seed, **total} if "total" in result else total))


if __name__ == "__main__":
    main()
