"""Terminal chat scripted through a pipe: memory commands need no API key."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.loop_helpers import API_KEY


def chat(tmp_path: Path, script: str, user: str = "alice") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SELFMIND_"))}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", "--db", str(tmp_path / "t.db"), "chat", "--user", user],
        input=script,
        capture_output=True,
        text=True,
        cwd=tmp_path,  # no .env here
        env=env,
        timeout=60,
    )


def test_commands_without_api_key(tmp_path: Path) -> None:
    proc = chat(
        tmp_path,
        "/remember The user prefers tabs over spaces.\n"
        "/remember the user prefers tabs over spaces\n"
        "/remember The user lives in Oslo.\n"
        "/memories tabs\n"
        "/stats\n"
        "/forget 2\n"
        "/forget 99\n"
        "/forget nope\n"
        "/remember    \n"
        "/bogus\n"
        "/memories\n"
        "/remember my password for staging is hunter2\n"
        "hello there\n",
    )
    # The message got no answer (no key): a piped chat says so and exits 1.
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: 1 of 1 messages got no answer (last: ")
    lines = proc.stdout.splitlines()
    assert lines[0] == "Remembered (#1): The user prefers tabs over spaces."
    assert lines[1] == "I already knew that (#1)."
    assert lines[2] == "Remembered (#2): The user lives in Oslo."
    assert lines[3] == "#1 The user prefers tabs over spaces."
    assert lines[4] == "2 memories (context 1, preference 1)"
    assert lines[5] == "Forgot #2."
    assert lines[6] == "No such memory."
    assert lines[7].startswith("Usage: /forget ID")
    assert lines[8] == "A memory needs some text."
    assert lines[9].startswith("Unknown command /bogus.")
    assert lines[10] == "#1 The user prefers tabs over spaces."
    assert lines[11] == (
        "That looks like a password, and secrets are never stored as memories, "
        "so nothing was remembered."
    )
    assert "ANTHROPIC_API_KEY" in lines[12]
    assert "Traceback" not in proc.stderr


def test_memories_persist_between_sessions_and_users_are_separate(tmp_path: Path) -> None:
    chat(tmp_path, "/remember The user's cat is called Miso.\n")
    again = chat(tmp_path, "/memories cat\n")
    assert "Miso" in again.stdout
    other = chat(tmp_path, "/memories cat\n/forget 1\n", user="mallory")
    assert "Miso" not in other.stdout and "No such memory." in other.stdout
    still = chat(tmp_path, "/memories\n")
    assert "Miso" in still.stdout


def test_empty_input_exits_zero(tmp_path: Path) -> None:
    proc = chat(tmp_path, "")
    assert proc.returncode == 0 and proc.stdout == ""


async def test_piped_chat_stays_plain_text(tmp_path: Path) -> None:
    """Not a terminal: one message per line, Markdown as sent, no ANSI, no files, no question
    before /forget all (a script means it), plurals right."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SELFMIND_"))}
    async with running_fake_anthropic() as fake:
        env.update(
            PYTHONPATH=str(REPO_ROOT),
            HOME=str(home),
            ANTHROPIC_API_KEY=API_KEY,
            ANTHROPIC_BASE_URL=fake.base_url,
            TERM="xterm-256color",
        )
        fake.enqueue("# Plan\n\nUse **bold** words.", kind="chat")
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "bots.cli", "--db", str(tmp_path / "t.db")],
            *["chat", "--user", "alice"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
            env=env,
        )
        script = "line one\n/remember The user likes tea.\n/stats\n/forget all\n/stats\n"
        out, err = await asyncio.wait_for(proc.communicate(script.encode()), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == (
        "# Plan\n\nUse **bold** words.\n"
        "Remembered (#1): The user likes tea.\n"
        "1 memory (preference 1)\n"
        "Forgot all 1 memory and our conversation history.\n"
        "0 memories\n"
    )
    assert [r.body["messages"][-1]["content"] for r in fake.requests_of("chat")] == ["line one"]
    assert not home.exists()  # no history or log file outside a terminal
