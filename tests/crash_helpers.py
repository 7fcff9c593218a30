"""A real ``selfmind slack --http`` process on a database, started and killed at will: the
machinery of the crash tests (tests/bots/slack_bot/test_slack_process.py) and the kill-9
soak (bench/soak_kill.py); what such a process left in the store (:func:`stored_turns`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack_server import FakeSlack

READY = re.compile(r"slack bot listening on http port (\d+)")


@dataclass
class BotProcess:
    proc: asyncio.subprocess.Process
    port: int
    stderr: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, 5)
        return code


async def start_bot(db: Path | str, env: dict[str, str], cwd: Path, *, port: int = 0) -> BotProcess:
    """Start the bot on ``db`` (a SQLite path or a database URL) and ``port`` (0: a free
    one); return once it logs that it listens."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bots.cli", "--db", str(db), "slack", "--http", "--port", str(port)),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stderr.readline(), 60)
        if not raw:
            raise AssertionError("bot exited before listening:\n" + "".join(lines))
        line = raw.decode()
        lines.append(line)
        ready = READY.search(line)
        if ready:
            break
    bot = BotProcess(proc, int(ready.group(1)), lines)

    async def drain() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            bot.stderr.append(raw.decode())

    bot.reader = asyncio.create_task(drain())
    return bot


async def stored_turns(db: Path | str) -> list[tuple[str, str]]:
    """``(role, text)`` of every stored turn, oldest first, read straight from the database
    (a SQLite path or ``sqlite:///`` URL, or a PostgreSQL URL) while a bot process may hold
    it: no store opened, no migration run."""
    url = str(db)
    if url.startswith(("postgres://", "postgresql://")):
        import asyncpg

        conn = await asyncpg.connect(url, timeout=10)
        try:
            rows = await conn.fetch("SELECT role, text FROM turns ORDER BY id")
        finally:
            await conn.close()
        return [(str(r["role"]), str(r["text"])) for r in rows]
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
        found = conn.execute("SELECT role, text FROM turns ORDER BY id").fetchall()
    return [(str(role), str(text)) for role, text in found]


async def recovery_streaming(slack: FakeSlack, claude: FakeAnthropic, *, chat_calls: int) -> None:
    """Wait until the fake Claude got its ``chat_calls``-th chat request (a start-up
    recovery's) and that answer edited the Slack message on screen twice since."""
    await slack.wait_until(
        lambda: len(claude.requests_of("chat")) == chat_calls, what="the recovery", timeout_s=20
    )
    updates = len(slack.calls("chat.update"))
    await slack.wait_until(
        lambda: len(slack.calls("chat.update")) > updates + 1,
        what="the recovery streaming",
        timeout_s=20,
    )
