"""End to end through the terminal chat process: SIGKILL right after an answer loses nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from core.store.sqlite.store import SQLiteStore
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import Reply, running_fake_anthropic, slow
from tests.loop_helpers import API_KEY, memories_reply, memory_text

PREFERENCE = "The user prefers answers in bullet points."


async def chat_process(db: Path, base_url: str, cwd: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SELFMIND_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=base_url)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bots.cli",
        "--db",
        str(db),
        "chat",
        "--user",
        "alice",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )


@pytest.mark.slow
async def test_sigkill_after_answer_then_resume_and_recall(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with running_fake_anthropic() as fake:
        fake.enqueue("Got it, bullet points from now on.", kind="chat")
        fake.enqueue(
            slow(memories_reply((PREFERENCE, "preference", "communication")), 60),
            kind="extract",
        )
        first = await chat_process(db, fake.base_url, tmp_path)
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write(b"I prefer answers in bullet points\n")
        await first.stdin.drain()
        line = await asyncio.wait_for(first.stdout.readline(), 30)
        assert b"bullet points from now on" in line
        for _ in range(300):  # the reflection call is in flight
            if fake.requests_of("extract"):
                break
            await asyncio.sleep(0.05)
        assert fake.requests_of("extract")
        first.send_signal(signal.SIGKILL)
        await first.wait()
        assert first.returncode == -signal.SIGKILL

        # A new process resumes the pending reflection (empty input: start, drain, exit).
        fake.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
        second = await chat_process(db, fake.base_url, tmp_path)
        out, err = await asyncio.wait_for(second.communicate(b""), 60)
        assert second.returncode == 0, err.decode()
        assert f"(remembered #1: {PREFERENCE})".encode() in out
        assert len(fake.requests_of("extract")) == 2

        # And the memory is recalled into the next conversation's prompt.
        fake.enqueue("- like this", kind="chat")
        third = await chat_process(db, fake.base_url, tmp_path)
        out, err = await asyncio.wait_for(
            third.communicate(b"How should you format answers for me?\n"), 60
        )
        assert third.returncode == 0, err.decode()
        assert b"- like this" in out
        system = memory_text(fake.requests_of("chat")[-1].body)
        assert PREFERENCE in system
        # The earlier exchange is still in the history too.
        first_message = fake.requests_of("chat")[-1].body["messages"][0]
        assert "I prefer answers in bullet points" in str(first_message)


@pytest.mark.slow
async def test_sigkill_mid_answer_then_a_restart_never_reflects_the_unanswered_line(
    tmp_path: Path,
) -> None:
    """Reflection waits for a delivered answer: a line whose answer a kill cut is not learned
    from at the next start (it was: the start-up resumed every turn still answering)."""
    db = tmp_path / "m.db"
    async with running_fake_anthropic() as fake:
        long_answer = " ".join(f"word{i}" for i in range(300))
        fake.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        fake.enqueue(
            memories_reply(("The user lives in Porto.", "fact", "general")), kind="extract"
        )
        first = await chat_process(db, fake.base_url, tmp_path)
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write(b"I moved to Porto last month\n")
        await first.stdin.drain()
        shown = b""
        while b"word3" not in shown:  # the answer is streaming
            shown += await asyncio.wait_for(first.stdout.read(64), 30)
        first.send_signal(signal.SIGKILL)
        await first.wait()

        second = await chat_process(db, fake.base_url, tmp_path)  # start, drain, exit
        out, err = await asyncio.wait_for(second.communicate(b""), 60)
        assert second.returncode == 0, err.decode()
        assert b"remembered" not in out
    assert fake.requests_of("extract") == []
    store = await SQLiteStore.open(str(db))
    try:
        [turn] = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert turn.text == "I moved to Porto last month" and turn.reflection == "answering"
        assert await store.list_memories(user_key="cli:alice") == []
    finally:
        await store.close()
