"""``/memory pause | resume | off | on`` in the terminal chat and ``selfmind memory ... --user
KEY`` on the command line: the same modes as Slack's and Discord's, in the same store."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bots.cli import app
from tests.bots.terminal.test_terminal import chat

runner = CliRunner()


def memory(db: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--db", str(db), "memory", *args])
    return result.exit_code, result.stdout, result.stderr


def test_pause_and_resume_from_the_command_line_and_the_chat(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert memory(db, "pause", "--user", "alice") == (
        0,
        "memory of cli:alice is paused: it recalls what it knows but learns nothing new;"
        " selfmind memory resume --user cli:alice undoes it\n",
        "",
    )
    proc = chat(
        tmp_path,
        "/memory\n/memory off\n/memory ON\n/memory sideways\n/memory pause\n/help\n",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:5] == [
        "Memory is paused: I still use what I know about you but learn nothing new."
        " /memory resume undoes it. Usage: /memory pause | resume | off | on.",
        "Memory is off: I neither use nor learn anything about you (nothing is deleted)."
        " /memory on undoes it.",
        "Memory is on: I use what I know about you and learn from our conversations.",
        "Usage: /memory pause | resume | off | on.",
        "Memory is paused: I still use what I know about you but learn nothing new."
        " /memory resume undoes it.",
    ]
    assert "/memory pause|resume|off|on" in lines[5]
    code, out, _ = memory(db, "--user", "alice", "--json")
    assert (code, json.loads(out)) == (0, {"user": "cli:alice", "mode": "paused"})
    assert memory(db, "resume", "--user", "alice")[1] == (
        "memory of cli:alice is on: it recalls what it knows and learns from conversations\n"
    )
    assert memory(db, "off", "--user", "bob")[1].startswith("memory of cli:bob is off: it neither")
    assert json.loads(memory(db, "--user", "alice", "--json")[1])["mode"] == "on"


def test_memory_mode_refuses_a_bad_word_or_key(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    code, out, err = memory(db, "sleep", "--user", "alice")
    assert (code, out) == (2, "")
    assert err == "error: memory: 'sleep' is not pause, resume, off or on\n"
    code, _, err = memory(db, "pause", "--user", "slack:\x00")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    code, _, err = memory(db, "--user", "alice")  # only shows: the store must exist
    assert code == 1 and err.startswith("error: no memory database at ")
    assert not db.exists()
