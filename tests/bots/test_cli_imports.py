"""Commands that never call Claude never import the Anthropic SDK (over a second of a
command's start-up: bench/startup.py) nor the chat side's other heavy modules, nor (on a
SQLite store) PostgreSQL's driver.

One child process runs every read-only command in turn (in-process, as ``selfmind`` would)
and reports which watched modules each left in ``sys.modules``: a fresh interpreter is the
only place where "was it imported?" has an answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

CHILD = r"""
import json, sys
from typer.testing import CliRunner
import bots.cli

WATCHED = (
    "anthropic", "httpx2", "aiohttp", "PIL", "pypdf", "slack_bolt", "discord", "prometheus_client",
    "asyncpg",
)
db = sys.argv[1]
commands = json.loads(sys.argv[2])
runner = CliRunner()
report = {"import bots.cli": [m for m in WATCHED if m in sys.modules]}
for args in commands:
    result = runner.invoke(bots.cli.app, ["--db", db, *args])
    assert result.exit_code == 0, (args, result.output, result.exception)
    report[" ".join(args)] = [m for m in WATCHED if m in sys.modules]
print(json.dumps(report))
"""

READ_ONLY = [
    ["memories", "remember", "--user", "alice", "Alice prefers tea over coffee."],
    ["users"],
    ["users", "--json"],
    ["memories", "list", "--user", "alice"],
    ["memories", "stats"],
    ["memories", "stats", "--user", "alice", "--json"],
    ["memories", "search", "--user", "alice", "tea"],
    ["memories", "export", "--user", "alice"],
    ["memories", "history", "--user", "alice"],
    ["usage"],
    ["db", "migrate"],
    ["db", "backup", "{backup}"],
]


def _imported(tmp_path: Path, commands: list[list[str]], **settings: str) -> dict[str, list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")} | settings
    args = [[a.replace("{backup}", str(tmp_path / "backup.db")) for a in c] for c in commands]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "m.db"), json.dumps(args)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report: dict[str, list[str]] = json.loads(out.stdout.splitlines()[-1])
    return report


def test_read_only_commands_never_import_the_model_sdk(tmp_path: Path) -> None:
    report = _imported(tmp_path, READ_ONLY)
    assert len(report) == len(READ_ONLY) + 1
    assert {command: mods for command, mods in report.items() if mods} == {}


def test_doctor_without_a_key_never_imports_the_model_sdk(tmp_path: Path) -> None:
    # doctor checks Claude only with a key (then it imports the SDK, in that check); it
    # reads the Slack settings through the Slack adapter, so slack_bolt may load.
    report = _imported(tmp_path, [READ_ONLY[0], ["doctor"]])
    assert "anthropic" not in report["doctor"] and "httpx2" not in report["doctor"]


def test_a_chat_with_nothing_to_answer_never_imports_the_model_sdk(tmp_path: Path) -> None:
    # With a key: the SDK (and aiohttp under it) loads at the first call to Claude, not at
    # the start of a chat that makes none (its memory commands, nothing to answer).
    report = _imported(
        tmp_path,
        [READ_ONLY[0], ["chat", "--user", "alice"]],
        ANTHROPIC_API_KEY="sk-ant-never-used",
        ANTHROPIC_BASE_URL="http://127.0.0.1:9",
    )
    assert not {"anthropic", "httpx2", "aiohttp"} & set(report["chat --user alice"])
