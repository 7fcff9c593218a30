"""Several bot processes (replicas) on one PostgreSQL database, as real separate processes:
a replica killed mid-reflection has its reflection completed by another, and Slack events
delivered to two ``selfmind slack --http`` replicas are answered once, with no duplicate
memories."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import pytest

from core.runtime import open_store
from tests.fakes.anthropic_server import running_fake_anthropic, slow
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.loop_helpers import memories_reply
from tests.slack_helpers import PREFERENCE, TEAM, bot_posts, clean_env, slack_process_env

LISTENING = re.compile(r"slack bot listening on http port (\d+)")


async def chat_replica(url: str, base_url: str, cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bots.cli", "--db", url, "chat", "--user", "alice"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=clean_env(ANTHROPIC_BASE_URL=base_url),
    )


@pytest.mark.slow
async def test_replica_killed_mid_reflection_is_completed_by_another(
    pg_url: str, tmp_path: Path
) -> None:
    async with running_fake_anthropic() as fake:
        fake.enqueue("Got it, bullet points from now on.", kind="chat")
        fake.enqueue(
            slow(memories_reply((PREFERENCE, "preference", "communication")), 120), kind="extract"
        )
        fake.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
        survivor = await chat_replica(pg_url, fake.base_url, tmp_path)  # idle, sweeping
        doomed = await chat_replica(pg_url, fake.base_url, tmp_path)
        assert doomed.stdin and doomed.stdout and survivor.stdin and survivor.stdout
        doomed.stdin.write(b"I prefer answers in bullet points\n")
        await doomed.stdin.drain()
        line = await asyncio.wait_for(doomed.stdout.readline(), 30)
        assert b"bullet points from now on" in line
        for _ in range(300):  # the doomed replica's reflection call is in flight
            if fake.requests_of("extract"):
                break
            await asyncio.sleep(0.05)
        assert len(fake.requests_of("extract")) == 1
        doomed.send_signal(signal.SIGKILL)
        assert await doomed.wait() == -signal.SIGKILL

        # The survivor notices within its sweep interval and completes the reflection.
        learned = await asyncio.wait_for(survivor.stdout.readline(), 30)
        assert f"(remembered #1: {PREFERENCE})".encode() in learned
        survivor.stdin.close()
        _, err = await asyncio.wait_for(survivor.communicate(), 30)
        assert survivor.returncode == 0, err.decode()
        assert len(fake.requests_of("extract")) == 2

    store = await open_store(pg_url)
    try:
        assert [m.text for m in await store.list_memories(user_key="cli:alice")] == [PREFERENCE]
        assert await store.turns_to_reflect() == []
        (turn,) = [
            t
            for t in await store.recent_turns(
                conversation_key="cli:alice:terminal:default", limit=5
            )
            if t.role == "user"
        ]
        assert turn.reflection == "done"
    finally:
        await store.close()


async def slack_replica(
    url: str, slack: FakeSlack, base_url: str, cwd: Path
) -> tuple[asyncio.subprocess.Process, str, asyncio.Task[None]]:
    """Start ``selfmind slack --http`` on a free port; its events URL once it listens."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "bots.cli", "--db", url, "slack", "--http", "--port", "0"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=slack_process_env(slack, base_url),
    )
    assert proc.stderr is not None
    seen: list[str] = []
    while not (ready := LISTENING.search(seen[-1] if seen else "")):
        raw = await asyncio.wait_for(proc.stderr.readline(), 30)
        if not raw:
            raise AssertionError("replica exited before listening:\n" + "".join(seen))
        seen.append(raw.decode())

    async def drain() -> None:
        assert proc.stderr is not None
        async for _ in proc.stderr:
            pass

    return proc, f"http://127.0.0.1:{ready.group(1)}/slack/events", asyncio.create_task(drain())


@pytest.mark.slow
async def test_two_slack_replicas_answer_each_event_once(pg_url: str, tmp_path: Path) -> None:
    async with (
        running_fake_slack() as slack,
        running_fake_anthropic(chunk_size=6, chunk_delay_s=0.01) as claude,
    ):
        replicas = [await slack_replica(pg_url, slack, claude.base_url, tmp_path) for _ in "ab"]
        texts = ["I prefer answers in bullet points", "Bullet points, please", "Short lists!"]
        for n in range(len(texts)):
            claude.enqueue(f"Answer {n}.", kind="chat")
            # Every reflection finds the same preference: it must be stored once.
            claude.enqueue(
                memories_reply((PREFERENCE, "preference", "communication")), kind="extract"
            )
        for n, text in enumerate(texts):
            envelope = slack.events.event_callback(
                slack.events.message(text, user="U1"), event_id=f"EvTwice{n}"
            )
            sent = await asyncio.gather(
                *(slack.send_event(url, envelope) for _, url, _ in replicas)
            )
            assert [r.status for r in sent] == [200, 200]
        await slack.wait_until(
            lambda: len(bot_posts(slack, "D1")) >= len(texts), what="the answers", timeout_s=30
        )
        for _ in range(600):  # the reflections (they call Claude, not Slack)
            if len(claude.requests_of("extract")) >= len(texts):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # a second answer would show up by now
        for proc, _, reader in replicas:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
            await asyncio.wait_for(reader, 5)
        assert len(bot_posts(slack, "D1")) == len(texts)
        assert len(claude.requests_of("chat")) == len(texts)
        assert len(claude.requests_of("extract")) == len(texts)

    store = await open_store(pg_url)
    try:
        memories = await store.list_memories(user_key=f"slack:{TEAM}:U1")
        assert [m.text for m in memories] == [PREFERENCE]
        assert await store.turns_to_reflect() == []
    finally:
        await store.close()
