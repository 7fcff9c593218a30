"""The admin CLI: JSON shapes, exit codes, and one clear line for each error."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.cli import app, large_buffers_by_mmap
from tests.conftest import REPO_ROOT

runner = CliRunner()


def cli(db: Path | str, *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--db", str(db), *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def test_remember_list_search_forget_round_trip(db_path: Path) -> None:
    code, out, _ = cli(
        db_path,
        "memories",
        "remember",
        "--user",
        "alice",
        "The user prefers tabs over spaces.",
        "--json",
    )
    assert code == 0
    assert json.loads(out) == {
        "id": 1,
        "status": "added",
        "duplicate_of": None,
        "superseded": [],
        "text": "The user prefers tabs over spaces.",
    }
    code, out, _ = cli(
        db_path,
        "memories",
        "remember",
        "--user",
        "alice",
        "the user prefers tabs over spaces",
        "--json",
    )
    assert json.loads(out) == {
        "id": 1,
        "status": "duplicate",
        "duplicate_of": 1,
        "superseded": [],
        "text": "the user prefers tabs over spaces",
    }
    cli(db_path, "memories", "remember", "--user", "slack:T1:U9", "The user likes tea.")

    code, out, _ = cli(db_path, "memories", "list", "--user", "cli:alice", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["text"] for r in rows] == ["The user prefers tabs over spaces."]
    assert set(rows[0]) == {"id", "text", "kind", "category", "origin", "place", "created_at"} | {
        "about",
        "valid_from",
        "valid_until",
    }
    assert rows[0]["place"] == "dm:cli::"  # remembered from the command line: the owner's DM

    code, out, _ = cli(
        db_path, "memories", "search", "--user", "alice", "tabs?", "--json", "--k", "3"
    )
    hits = json.loads(out)
    assert code == 0 and hits[0]["id"] == 1 and hits[0]["score"] > 0

    code, out, _ = cli(db_path, "memories", "stats", "--json")
    assert json.loads(out)["total"] == 2
    code, out, _ = cli(db_path, "memories", "stats", "--user", "alice", "--json")
    assert json.loads(out) == {
        "total": 1,
        "by_kind": {"preference": 1},
        "by_category": {"code": 1},
    }

    code, out, _ = cli(db_path, "memories", "forget", "--user", "alice", "1", "--json")
    assert code == 0 and json.loads(out) == {"forgotten": 1}
    code, out, _ = cli(db_path, "memories", "history", "--user", "alice", "--json")
    assert [e["event"] for e in json.loads(out)] == ["added", "forgotten"]
    assert set(json.loads(out)[0]) == {"memory_id", "event", "at", "conversation", "change"}


def test_forget_another_users_id_fails_and_keeps_it(db_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "bob", "The user likes jazz.")
    code, out, err = cli(db_path, "memories", "forget", "--user", "alice", "1")
    assert code == 1 and err.strip() == "error: no such memory" and out == ""
    code, out, _ = cli(db_path, "memories", "list", "--user", "bob", "--json")
    assert len(json.loads(out)) == 1


def test_forget_all(db_path: Path) -> None:
    for i in range(3):
        cli(db_path, "memories", "remember", "--user", "alice", f"The user has {i} cats.")
    cli(db_path, "memories", "remember", "--user", "bob", "The user has a dog.")
    code, out, _ = cli(db_path, "memories", "forget", "--user", "alice", "--all", "--yes", "--json")
    assert code == 0 and json.loads(out) == {"forgotten": 3}
    code, out, _ = cli(db_path, "memories", "stats", "--json")
    assert json.loads(out)["total"] == 1


def test_forget_all_asks_on_a_terminal_and_refuses_without_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(2):
        cli(db_path, "memories", "remember", "--user", "carol", f"The user has {i} cats.")

    def carols() -> int:
        return int(json.loads(cli(db_path, "memories", "stats", "--json")[1])["total"])

    # a script (no terminal) and no --yes: refused, one line, nothing erased
    code, out, err = cli(db_path, "memories", "forget", "--user", "carol", "--all")
    assert (code, out) == (2, "")
    assert err == (
        "error: memories forget --all would erase all 2 memories of cli:carol: it asks first,"
        " and there is no terminal to ask on; add --yes to erase without a question (nothing"
        " was erased)\n"
    )
    assert carols() == 2
    # a terminal: asked, and no (the default) keeps them
    monkeypatch.setattr("bots.cli.stdin_is_terminal", lambda: True)
    for answer in ("n\n", "\n"):
        code, out, _ = cli(db_path, "memories", "forget", "--user", "carol", "--all", input=answer)
        assert code == 0
        assert out.startswith("Erase all 2 memories of cli:carol? This cannot be undone [y/N]")
        assert out.endswith("nothing forgotten: cli:carol keeps 2 memories\n")
        assert carols() == 2
    code, out, _ = cli(db_path, "memories", "forget", "--user", "carol", "--all", input="y\n")
    assert code == 0 and out.endswith("forgot all 2 memories of cli:carol\n")
    assert carols() == 0


def test_export_import_round_trip(db_path: Path, tmp_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user prefers vim.")
    cli(db_path, "memories", "remember", "--user", "alice", "The user lives in Oslo.")
    code, out, _ = cli(db_path, "memories", "export", "--user", "alice")
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2
    record = json.loads(lines[0])
    assert set(record) == {
        "text",
        "kind",
        "category",
        "origin",
        "place",
        "source",
        "created_at",
        "updated_at",
    }
    dump = tmp_path / "dump.jsonl"
    dump.write_text(out, encoding="utf-8")
    code, out, _ = cli(db_path, "memories", "import", "--user", "carol", str(dump), "--json")
    assert code == 0 and json.loads(out) == {"added": 2, "duplicates": 0, "superseded": 0}
    code, out, _ = cli(db_path, "memories", "import", "--user", "carol", str(dump), "--json")
    assert json.loads(out) == {"added": 0, "duplicates": 2, "superseded": 0}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "The user is fine."}\nnot json\n', "line 2: not JSON"),
        ('{"text": "ok line."}\n{"kind": "fact"}\n', 'line 2: expected an object with a "text"'),
        ('{"text": "ok line."}\n{"text": "x", "kind": "rumour"}\n', "line 2: kind must be"),
        ('{"text": "' + "y" * 300 + '"}\n', "line 1: a memory must be under 200"),
        ('{"text": "ok."}\n{"text": "t", "created_at": "yesterday"}\n', "line 2: created_at"),
        ("[1, 2]\n", "line 1: expected an object"),
        (
            '{"text": "ok."}\n{"text": "The user\'s AWS key is AKIAZ7Q2XK4M9TBW3HJD."}\n',
            "line 2: it holds an AWS key; secrets are never stored as memories",
        ),
    ],
)
def test_import_malformed_line_imports_nothing(
    db_path: Path, tmp_path: Path, content: str, message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, encoding="utf-8")
    code, out, err = cli(db_path, "memories", "import", "--user", "alice", str(bad))
    assert code == 1 and out == ""
    assert err.startswith(f"error: {message}") and err.count("\n") == 1
    code, out, _ = cli(db_path, "memories", "stats", "--json")
    assert json.loads(out)["total"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memories", "remember", "--user", "alice", "   "], "a memory needs some text"),
        (["memories", "remember", "--user", "alice", "x" * 20_000], "under 200 characters"),
        (
            ["memories", "remember", "--user", "alice", "The PIN is 4711"],
            "That looks like a PIN, and secrets are never stored as memories",
        ),
        (["memories", "remember", "--user", ":", "hi"], "malformed user key"),
        (["memories", "list", "--user", " "], "a user is required"),
        (["memories", "forget", "--user", "alice"], "give a memory ID or --all"),
        (["memories", "forget", "--user", "alice", "1", "--all"], "give a memory ID or --all"),
        (["memories", "import", "--user", "alice", "/nonexistent/x.jsonl"], "cannot read"),
    ],
)
def test_cli_errors_are_one_line(db_path: Path, args: list[str], message: str) -> None:
    code, out, err = cli(db_path, *args)
    assert code in (1, 2) and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_database_settings(tmp_path: Path) -> None:
    code, _, err = cli("ftp://host/x", "memories", "list", "--user", "a")
    assert code == 1 and "unsupported scheme 'ftp'" in err
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    code, _, err = cli(garbage, "memories", "list", "--user", "a")
    assert code == 1 and err.startswith("error: cannot use database")


def test_env_setting_error_names_the_variable(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bots.cli", "memories", "list", "--user", "a"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "SELFMIND_TOP_K": "lots"},
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: SELFMIND_TOP_K:") and "Traceback" not in proc.stderr


def test_db_url_forms(tmp_path: Path) -> None:
    path = tmp_path / "url.db"
    code, _, _ = cli(f"sqlite:///{path}", "memories", "remember", "--user", "a", "The user x.")
    assert code == 0 and path.exists()


def test_read_commands_do_not_create_a_mistyped_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "memroy.db"
    for args in (["memories", "list", "--user", "a"], ["memories", "stats"]):
        code, out, err = cli(missing, *args)
        assert code == 1 and out == ""
        assert err == f"error: no memory database at {missing} (nothing stored there yet)\n"
    assert not missing.parent.exists()
    code, _, _ = cli(missing, "memories", "remember", "--user", "a", "The user likes tea.")
    assert code == 0 and missing.exists()  # writing commands create it


def test_forget_an_impossible_id_is_one_line(db_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    code, out, err = cli(db_path, "memories", "forget", "--user", "alice", "9" * 23)
    assert (code, out, err) == (1, "", "error: no such memory\n")


def test_new_commands_refuse_bad_input_with_one_line(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    code, _, err = cli(db_path, "usage", "--by", "planet")
    assert code == 2 and err == "error: --by must be user, workspace, kind or model\n"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(db_path.parent)  # no .env
    code, _, err = cli(db_path, "memories", "cleanup", "--user", "alice", "--dry-run")
    assert code == 1 and err.startswith("error: ANTHROPIC_API_KEY is not set: ")
    assert err.count("\n") == 1
    code, _, err = cli(db_path, "memories", "undo", "--user", "alice", "nope")
    assert code == 1 and err.startswith("error: no change 'nope'") and err.count("\n") == 1
    monkeypatch.setenv("SELFMIND_SQLITE_SYNCHRONOUS", "sometimes")
    code, _, err = cli(db_path, "memories", "list", "--user", "alice")
    assert code == 1 and err.startswith("error: SELFMIND_SQLITE_SYNCHRONOUS:")
    monkeypatch.delenv("SELFMIND_SQLITE_SYNCHRONOUS")
    code, out, _ = cli(db_path, "memories", "list", "--user", "alice", "--json")
    assert code == 0 and [r["text"] for r in json.loads(out)] == ["The user likes tea."]


def test_feedback_report_by_day_and_workspace(db_path: Path) -> None:
    import asyncio
    from datetime import UTC, datetime

    from core.runtime import open_store

    async def seed() -> None:
        store = await open_store(f"sqlite:///{db_path}")
        try:
            for user, positive in (("U1", True), ("U2", False), ("U3", True)):
                await store.record_feedback(
                    answer_ref="slack:T1:C1:1.1",
                    user_key=f"slack:T1:{user}",
                    workspace="T1",
                    positive=positive,
                    at=datetime(2026, 12, 1, 9, tzinfo=UTC),
                )
        finally:
            await store.close()

    asyncio.run(seed())
    code, out, _ = cli(db_path, "feedback", "--json")
    assert code == 0
    assert json.loads(out)["rows"] == [
        {"day": "2026-12-01", "workspace": "T1", "positive": 2, "negative": 1}
    ]
    code, out, _ = cli(db_path, "feedback")
    assert code == 0 and out.splitlines()[-1].split() == ["total", "2", "1"]
    code, _, err = cli(db_path, "feedback", "--since", "yesterday")
    assert code == 2 and err.count("\n") == 1


def test_commands_run_on_uvloop_where_it_is_installed() -> None:
    """bots.cli.run picks uvloop's event loop (a dependency except on Windows); without it,
    asyncio's."""
    import asyncio
    import importlib.util

    from bots.cli import event_loop_factory, run

    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    module = run(loop_module())
    if importlib.util.find_spec("uvloop") is None:
        assert event_loop_factory() is None and module.startswith("asyncio")
    else:
        assert event_loop_factory() is not None and module.startswith("uvloop")


def test_large_buffers_go_back_to_the_system_on_glibc() -> None:
    """The bots ask glibc to serve large buffers (a file's bytes, its base64) by mmap, so
    they are returned when freed (bench/files.py: the peak RSS of a burst of PDFs)."""
    import platform

    expected = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
    assert large_buffers_by_mmap() is expected


def test_help_reads_like_the_clis_people_like() -> None:
    """No type placeholders (``<bool>``, ``<list[str]>``), chat, slack and discord first,
    examples, RST-free text (the help a user gets from ``selfmind``, in its own process)."""
    import functools
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    @functools.cache
    def help_of(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "bots.cli", *args, "--help"],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
            env={"PYTHONPATH": str(REPO_ROOT), "COLUMNS": "100", "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    top = help_of()
    panels = [line for line in top.splitlines() if line.startswith("╭─ ") and "Options" not in line]
    assert "Talk to it" in panels[0]
    assert top.index(" chat ") < top.index(" slack ") < top.index(" users ") < top.index(" usage ")
    assert "Examples:" in top and "selfmind memories forget --user alice 3" in top
    for args in [(), ("memories", "list"), ("eval", "reflection"), ("eval", "dedupe"),
                 ("db", "migrate"), ("usage",), ("memories", "forget")]:  # fmt: skip
        text = help_of(*args)
        assert not re.search(r"<[a-z]", text) and "``" not in text, (args, text)
    assert "--model  " in help_of("eval", "reflection").replace("MODEL", "  ")
    assert re.search(r"--user +-u +KEY ", help_of("memories", "list"))


def test_forget_says_which_id_it_forgot(db_path: Path) -> None:
    code, out, _ = cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    assert code == 0
    code, out, _ = cli(db_path, "memories", "forget", "--user", "alice", "1")
    assert (code, out) == (0, "forgot #1 of cli:alice\n")
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes coffee.")
    code, out, _ = cli(db_path, "memories", "forget", "--user", "alice", "--all", "--yes")
    assert (code, out) == (0, "forgot all 1 memories of cli:alice\n")


def test_stats_labels_kinds_and_categories(db_path: Path) -> None:
    for text in (
        "The user prefers tabs over spaces.",
        "The user prefers short answers.",
        "The user lives in Oslo.",
    ):
        cli(db_path, "memories", "remember", "--user", "alice", text)
    code, out, _ = cli(db_path, "memories", "stats", "--json")
    data = json.loads(out)
    kinds, categories = data["by_kind"], data["by_category"]
    code, out, err = cli(db_path, "memories", "stats", "--user", "alice")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "3 active memories of cli:alice"
    k, c = lines.index("by kind:"), lines.index("by category:")
    assert 0 < k < c
    shown_kinds = dict(line.split() for line in lines[k + 1 : c])
    shown_categories = dict(line.split() for line in lines[c + 1 :])
    assert {n: int(v) for n, v in shown_kinds.items()} == kinds
    assert {n: int(v) for n, v in shown_categories.items()} == categories
    assert not set(shown_kinds) & set(shown_categories)
    assert cli(db_path, "memories", "stats")[1].splitlines()[0] == "3 active memories in the store"
