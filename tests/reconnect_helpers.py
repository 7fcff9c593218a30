"""Connection faults against the real ``selfmind slack`` and ``selfmind discord`` processes
on the fakes, shared by the reconnect and revoked-token tests and bench/reconnect.py.

:class:`BotProcess` runs either bot as a child process (``slack``, ``slack --http``,
``discord``). :class:`SlackFaultRun` applies faults to the fake Slack (with
``redeliver_unacked`` on, as Slack redelivers) and sends one DM per event from its own user
(so each event's answers are the bot's posts in that user's DM channel); the fake Anthropic
API's chat answers echo the user's message. :class:`DiscordFaultRun` does the same on the
fake gateway, counting the bot's posts that echo each message's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.discord_helpers import World, discord_process_env, eventually
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.discord_server import FakeDiscord, FakeUser
from tests.fakes.slack_server import FakeSlack
from tests.slack_helpers import bot_posts, slack_process_env

READY_LINE = "slack bot connected in socket mode"
HTTP_READY = re.compile(r"slack bot listening on http port (\d+)")
DISCORD_READY_LINE = "connected as "
SOCKET_MODE = ("slack",)
HTTP_MODE = ("slack", "--http", "--port", "0")
DISCORD = ("discord",)
SEND_ERRORS = (ConnectionError, RuntimeError)
"""What pushing an envelope onto a socket that is going away raises; the fake keeps the
envelope as unacknowledged and redelivers it on the next connection."""


def socket_mode_env(slack: FakeSlack, claude: FakeAnthropic, **extra: str) -> dict[str, str]:
    """The environment of ``selfmind slack`` in Socket Mode against the fakes, with short
    reconnect backoff (50 ms first, 0.5 s at most)."""
    values = {
        "SLACK_SIGNING_SECRET": "",
        "SLACK_APP_TOKEN": slack.app_token,
        "SELFMIND_RECONNECT_BACKOFF_S": "0.05",
        "SELFMIND_RECONNECT_BACKOFF_MAX_S": "0.5",
    }
    return slack_process_env(slack, claude.base_url, **(values | extra))


def discord_env(w: World, **extra: str) -> dict[str, str]:
    """The environment of ``selfmind discord`` against the fakes, with short reconnect
    backoff (50 ms first, 0.5 s at most)."""
    values = {"SELFMIND_RECONNECT_BACKOFF_S": "0.05", "SELFMIND_RECONNECT_BACKOFF_MAX_S": "0.5"}
    return discord_process_env(w, **(values | extra))


@dataclass
class BotProcess:
    """``selfmind <args>`` as a child process (``args``: :data:`SOCKET_MODE`,
    :data:`HTTP_MODE`, :data:`DISCORD`); stderr lines collected; ``port`` is the HTTP
    port in HTTP mode."""

    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None
    port: int | None = None

    @classmethod
    async def start(
        cls, db: Path | str, env: dict[str, str], cwd: Path, args: tuple[str, ...] = SOCKET_MODE
    ) -> BotProcess:
        """Start it on ``db`` (a SQLite path or a database URL); return once it logged that
        it is connected (or listening)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "bots.cli", "--db", str(db), *args),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        bot = cls(proc)
        assert proc.stderr is not None
        while True:
            raw = await asyncio.wait_for(proc.stderr.readline(), 60)
            if not raw:
                raise AssertionError("bot exited before connecting:\n" + "".join(bot.lines))
            line = raw.decode()
            bot.lines.append(line)
            if args == HTTP_MODE and (match := HTTP_READY.search(line)):
                bot.port = int(match.group(1))
                break
            if (args == SOCKET_MODE and READY_LINE in line) or (
                args == DISCORD and DISCORD_READY_LINE in line
            ):
                break
        bot.reader = asyncio.create_task(bot._drain())
        return bot

    @property
    def events_url(self) -> str:
        """Where the fake Slack posts events in HTTP mode."""
        return f"http://127.0.0.1:{self.port}/slack/events"

    def kill(self) -> None:
        """SIGKILL, if it still runs (a test's clean-up)."""
        if self.proc.returncode is None:
            self.proc.kill()

    async def _drain(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.lines.append(raw.decode())

    async def wait(self, timeout_s: float = 30) -> int:
        """The exit code, once it exits by itself."""
        code = await asyncio.wait_for(self.proc.wait(), timeout_s)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, 5)
        return code

    async def stop(self) -> int:
        """SIGTERM and the exit code."""
        if self.proc.returncode is None:
            self.proc.terminate()
        return await self.wait()


Fault = Callable[[FakeSlack], Awaitable[None]]


async def _refresh(slack: FakeSlack) -> None:
    await slack.disconnect_sockets("refresh_requested")


async def _warning(slack: FakeSlack) -> None:
    await slack.disconnect_sockets("warning")


async def _too_many(slack: FakeSlack) -> None:
    await slack.disconnect_sockets("too_many_websockets")


async def _abrupt(slack: FakeSlack) -> None:
    await slack.drop_sockets(abrupt=True)


async def _server_close(slack: FakeSlack) -> None:
    await slack.drop_sockets()


async def _open_5xx(slack: FakeSlack) -> None:
    slack.refuse_connections(3)
    await slack.drop_sockets(abrupt=True)


async def _ws_refused(slack: FakeSlack) -> None:
    slack.refuse_sockets(3)
    await slack.drop_sockets(abrupt=True)


SLACK_FAULTS: dict[str, Fault] = {
    "disconnect refresh_requested": _refresh,
    "disconnect warning": _warning,
    "disconnect too_many_websockets": _too_many,
    "close frame from server": _server_close,
    "abrupt TCP reset": _abrupt,
    "apps.connections.open 500 x3": _open_5xx,
    "websocket refused (503) x3": _ws_refused,
}
"""Every fault but "abrupt close mid-event", which :meth:`SlackFaultRun.mid_event` applies
(its event is the one sent on the dying connection)."""


@dataclass
class FaultStats:
    """One fault's row: reconnect times (fault to the next accepted websocket) and events."""

    fault: str
    reconnect_s: list[float] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def row(self, answers: dict[str, int]) -> dict[str, object]:
        counts = [answers.get(e, 0) for e in self.events]
        times = self.reconnect_s or [0.0]
        return {
            "fault": self.fault,
            "reconnect_p50_s": round(statistics.median(times), 3),
            "reconnect_max_s": round(max(times), 3),
            "sent": len(counts),
            "answered": sum(1 for c in counts if c >= 1),
            "answered_twice": sum(1 for c in counts if c >= 2),
            "lost": sum(1 for c in counts if c == 0),
        }


class SlackFaultRun:
    """Faults and events against one running bot; ``users`` numbers each event's sender."""

    def __init__(self, slack: FakeSlack) -> None:
        self.slack = slack
        self.users = 1000
        self.stats: dict[str, FaultStats] = {}

    def _stats(self, fault: str) -> FaultStats:
        return self.stats.setdefault(fault, FaultStats(fault))

    async def send_event(self, fault: str) -> str:
        """A DM from a new user; returns its channel. A push onto a socket going away is
        left to the fake's redelivery."""
        self.users += 1
        user = f"U{self.users}"
        event = self.slack.events.message(f"hello number {self.users}", user=user)
        with contextlib.suppress(*SEND_ERRORS):
            await self.slack.push_event(event)
        channel = self.slack.events.dm_channel(user)
        self._stats(fault).events.append(channel)
        return channel

    async def apply(self, fault: str, *, timeout_s: float = 20.0) -> None:
        """Apply ``fault`` and wait until the bot has a new connection (timed)."""
        before = self.slack.socket_connections
        started = time.monotonic()
        await SLACK_FAULTS[fault](self.slack)
        await self.slack.wait_until(
            lambda: self.slack.socket_connections > before,
            timeout_s=timeout_s,
            what=f"reconnect after {fault}",
        )
        self._stats(fault).reconnect_s.append(time.monotonic() - started)

    async def mid_event(self, *, timeout_s: float = 20.0) -> None:
        """Send an event and reset the connection before its ack can come back."""
        fault = "abrupt close mid-event"
        before = self.slack.socket_connections
        started = time.monotonic()
        self.users += 1
        user = f"U{self.users}"
        event = self.slack.events.message(f"hello number {self.users}", user=user)
        with contextlib.suppress(*SEND_ERRORS):
            await self.slack.push_then_drop("events_api", self.slack.events.event_callback(event))
        self._stats(fault).events.append(self.slack.events.dm_channel(user))
        await self.slack.wait_until(
            lambda: self.slack.socket_connections > before, timeout_s=timeout_s, what=fault
        )
        self._stats(fault).reconnect_s.append(time.monotonic() - started)

    def answers(self) -> dict[str, int]:
        """Bot posts per event channel."""
        return {
            channel: len(bot_posts(self.slack, channel))
            for stats in self.stats.values()
            for channel in stats.events
        }

    async def wait_answered(self, *, timeout_s: float = 30.0, settle_s: float = 1.0) -> None:
        """Wait until every event has an answer (or ``timeout_s``), then ``settle_s`` more
        so a second answer would show."""
        with contextlib.suppress(TimeoutError):
            await self.slack.wait_until(
                lambda: all(n >= 1 for n in self.answers().values()),
                timeout_s=timeout_s,
                what="every event answered",
            )
        await asyncio.sleep(settle_s)

    def rows(self) -> list[dict[str, object]]:
        answers = self.answers()
        return [stats.row(answers) for stats in self.stats.values()]


# ---- Discord --------------------------------------------------------------------------------

DiscordFault = Callable[[FakeDiscord], Awaitable[None]]


async def _close_4000(fake: FakeDiscord) -> None:
    await fake.disconnect(code=4000)


async def _op7(fake: FakeDiscord) -> None:
    await fake.request_reconnect()


async def _reset(fake: FakeDiscord) -> None:
    await fake.drop()


async def _invalid_session(fake: FakeDiscord) -> None:
    await fake.invalidate_session()


async def _refused_3(fake: FakeDiscord) -> None:
    fake.refuse_gateway(times=3)
    await fake.drop()


async def _unreachable(fake: FakeDiscord) -> None:
    fake.refuse_gateway(for_s=1.5)
    await fake.drop()


DISCORD_FAULTS: dict[str, DiscordFault] = {
    "close 4000 (resume)": _close_4000,
    "op 7 RECONNECT": _op7,
    "op 9 INVALID_SESSION": _invalid_session,
    "abrupt TCP reset": _reset,
    "gateway refused (503) x3": _refused_3,
    "gateway refused for 1.5 s": _unreachable,
}
NO_REPLAY = frozenset({"op 9 INVALID_SESSION"})
"""Faults after which Discord starts a new session (IDENTIFY, not RESUME): what it sent in
between is not replayed, on Discord as on the fake, so no message is sent while down."""
SOAK_FAULTS = [f for f in DISCORD_FAULTS if f not in NO_REPLAY]
"""The faults of a soak run, where messages flow at any time: those Discord replays across."""


class DiscordFaultRun:
    """Faults against one bot on the fake gateway: for each, one message sent while the
    connection is down (replayed on RESUME) and one after it is back; answers are the bot's
    posts that echo the message's token (the fake Anthropic API echoes the user's text)."""

    def __init__(self, fake: FakeDiscord, author: FakeUser) -> None:
        self.fake = fake
        self.author = author
        self.number = 0
        self.stats: dict[str, FaultStats] = {}

    async def send(self, fault: str) -> None:
        self.number += 1
        token = f"probe{self.number:04d}"
        text = f"{self.fake.bot_user.mention} say {token}"
        await self.fake.dispatch_message(self.fake.channel_id, self.author, text)
        self.stats.setdefault(fault, FaultStats(fault)).events.append(token)

    def _sessions(self) -> int:
        return len(self.fake.resumes) + len(self.fake.identifies)

    async def apply(self, fault: str, *, timeout_s: float = 60.0) -> None:
        """Apply ``fault``, send one message while down (unless in :data:`NO_REPLAY`), wait
        for the RESUME or IDENTIFY (timed), send one more."""
        before = self._sessions()
        started = time.monotonic()
        await DISCORD_FAULTS[fault](self.fake)
        if fault not in NO_REPLAY:
            await self.send(fault)
        await eventually(lambda: self._sessions() > before, timeout_s=timeout_s, what=fault)
        self.stats.setdefault(fault, FaultStats(fault)).reconnect_s.append(
            time.monotonic() - started
        )
        await self.send(fault)

    def answers(self) -> dict[str, int]:
        bot_id = str(self.fake.bot_user.id)
        posts = [
            str(m["content"])
            for m in self.fake.messages_in(self.fake.channel_id)
            if m["author"]["id"] == bot_id
        ]
        tokens = [t for s in self.stats.values() for t in s.events]
        return {t: sum(1 for p in posts if t in p) for t in tokens}

    async def wait_answered(self, *, timeout_s: float = 30.0, settle_s: float = 1.0) -> None:
        with contextlib.suppress(TimeoutError):
            await eventually(
                lambda: all(n >= 1 for n in self.answers().values()), timeout_s=timeout_s
            )
        await asyncio.sleep(settle_s)

    def rows(self) -> list[dict[str, object]]:
        answers = self.answers()
        return [stats.row(answers) for stats in self.stats.values()]


# ---- soak: many forced disconnects with events flowing ---------------------------------------


async def soak(
    apply: Callable[[str], Awaitable[None]],
    send: Callable[[], Awaitable[object]],
    kinds: list[str],
    *,
    faults: int,
    over_s: float,
    every_s: float,
    seed: int = 20,
) -> None:
    """``faults`` forced disconnects (``kinds`` in a shuffled cycle) paced evenly over
    ``over_s`` seconds by ``apply``, while ``send`` sends an event every ``every_s``."""
    rng = random.Random(seed)
    order = [kinds[i % len(kinds)] for i in range(faults)]
    rng.shuffle(order)
    stop = asyncio.Event()

    async def flow() -> None:
        while not stop.is_set():
            await send()
            await asyncio.sleep(every_s)

    sender = asyncio.create_task(flow())
    try:
        started = time.monotonic()
        for i, fault in enumerate(order):
            await asyncio.sleep(max(0.0, started + i * over_s / faults - time.monotonic()))
            await apply(fault)
        await asyncio.sleep(max(0.0, started + over_s - time.monotonic()))
    finally:
        stop.set()
        await sender
