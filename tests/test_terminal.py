"""Terminal chat scripted through a pipe: memory commands need no API key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


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
        "hello there\n",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Remembered (#1)."
    assert lines[1] == "I already knew that (#1)."
    assert lines[2] == "Remembered (#2)."
    assert lines[3] == "#1 The user prefers tabs over spaces."
    assert lines[4] == "2 memories (fact 2)"
    assert lines[5] == "Forgot #2."
    assert lines[6] == "No such memory."
    assert lines[7].startswith("Usage: /forget ID")
    assert lines[8] == "A memory needs some text."
    assert lines[9].startswith("Unknown command /bogus.")
    assert lines[10] == "#1 The user prefers tabs over spaces."
    assert "ANTHROPIC_API_KEY" in lines[11]
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
