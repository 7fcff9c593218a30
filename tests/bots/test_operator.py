"""What an operator needs: --version, users, mistyped keys, db backup, JSON logs, light
imports, and start-up checks that end as one line before any network or database."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bots.cli import app, run
from bots.slack_bot.app import authenticate, web_clients
from core.errors import ConfigError
from core.logs import configure_logging
from core.settings import DEFAULT_SLACK_API_URL, load_settings
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import running_fake_slack
from tests.slack_helpers import running_bot, slack_settings

runner = CliRunner()
SETTINGS_PREFIXES = ("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_")


def cli(db: Path | str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["--db", str(db), *args])
    return result.exit_code, result.stdout, result.stderr


def selfmind(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``selfmind ARGS`` as a user runs it: a fresh process, no SelfMind variables inherited
    (only ``env``), HOME in ``cwd``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIXES)}
    base.update(PYTHONPATH=str(REPO_ROOT), HOME=str(cwd / "home"))
    return subprocess.run(
        [sys.executable, "-m", "bots.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=base | (env or {}),
        input=stdin,
        timeout=120,
    )


# --------------------------------------------------------------------- version, users


def test_version_comes_from_the_package_metadata() -> None:
    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"selfmind {version('selfmind')}\n")


def test_license_matches_pyproject() -> None:
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 SelfMind contributors\n")
    assert 'license = "MIT"' in (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_users_lists_every_key_with_counts(db_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    cli(db_path, "memories", "remember", "--user", "slack:T1:U1", "The user lives in Oslo.")
    cli(db_path, "memories", "remember", "--user", "slack:T1:U1", "The user uses vim.")
    code, out, _ = cli(db_path, "users", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [(r["user"], r["memories"], r["messages"]) for r in rows] == [
        ("cli:alice", 1, 0),
        ("slack:T1:U1", 2, 0),
    ]
    assert all(r["last_active"].endswith("+00:00") for r in rows)
    code, out, _ = cli(db_path, "users")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["user", "memories", "messages"]
    assert lines[2].split()[:3] == ["slack:T1:U1", "2", "0"]


def test_users_on_an_empty_store(db_path: Path) -> None:
    cli(db_path, "db", "migrate")
    assert cli(db_path, "users") == (0, "no users yet\n", "")
    assert cli(db_path, "users", "--json") == (0, "[]\n", "")


@pytest.mark.parametrize("typo", ["slack:T1", "discord:abc", "Alice", "slack:T1:U2"])
@pytest.mark.parametrize(
    "command",
    [["list"], ["search", "tea"], ["stats"], ["history"], ["export"]],
)
def test_a_mistyped_user_key_points_at_users(db_path: Path, typo: str, command: list[str]) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    cli(db_path, "memories", "remember", "--user", "slack:T1:U1", "The user likes tea.")
    code, out, err = cli(db_path, "memories", *command, "--user", typo)
    assert (code, out) == (1, "")
    assert err.startswith("error: no user ") and "selfmind users" in err
    assert err.count("\n") == 1


def test_a_known_user_with_everything_forgotten_reads_as_no_memories(db_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "alice", "The user likes tea.")
    cli(db_path, "memories", "forget", "--user", "alice", "--all", "--yes")
    assert cli(db_path, "memories", "list", "--user", "alice") == (0, "no memories\n", "")


# --------------------------------------------------------------------- db backup

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from core.types import NewMemory
    from core.rules.dedupe import Deduper
    from core.store.sqlite.store import SQLiteStore

    async def main() -> None:
        store = await SQLiteStore.open(sys.argv[1])
        dedupe = Deduper(0.99)
        i = 0
        while True:
            i += 1
            text = f"The user wrote fact number {i} about item {i * 7919}."
            added = await store.add(user_key="cli:w", memory=NewMemory(text), dedupe=dedupe)
            print(added.id, flush=True)  # committed

    asyncio.run(main())
    """
)


def test_backup_of_a_store_while_a_writer_writes(tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    assert selfmind("--db", str(db), "db", "migrate", cwd=tmp_path).returncode == 0
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert writer.stdout is not None
        confirmed = [int(writer.stdout.readline()) for _ in range(30)]
        backup = tmp_path / "backups" / "copy.db"
        backup.parent.mkdir()
        done = selfmind("--db", str(db), "db", "backup", str(backup), "--json", cwd=tmp_path)
        more = int(writer.stdout.readline())  # still writing after the copy
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["integrity"] == "ok"
    assert more > confirmed[-1]
    assert backup.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(backup) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        ids = {row[0] for row in conn.execute("SELECT id FROM memories")}
    assert set(confirmed) <= ids
    # Usable with --db at once.
    listed = selfmind("--db", str(backup), "memories", "list", "--user", "w", "--json",
                      "--limit", "1000", cwd=tmp_path)  # fmt: skip
    assert listed.returncode == 0 and {m["id"] for m in json.loads(listed.stdout)} == ids


def test_backup_refuses_bad_targets_in_one_line(db_path: Path, tmp_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "a", "The user likes tea.")
    existing = tmp_path / "there.db"
    existing.write_bytes(b"keep me")
    cases = [
        (db_path, f"error: {db_path} is the database itself: give another path\n"),
        (existing, f"error: cannot create {existing}: File exists\n"),
        (tmp_path / "no" / "dir.db", f"error: cannot create {tmp_path}/no/dir.db: No such"),
    ]
    for target, message in cases:
        code, out, err = cli(db_path, "db", "backup", str(target))
        assert (code, out) == (1, "") and err.startswith(message) and err.count("\n") == 1
    assert existing.read_bytes() == b"keep me"
    code, _, err = cli(tmp_path / "missing.db", "db", "backup", str(tmp_path / "b.db"))
    assert code == 1 and "no memory database at" in err and not (tmp_path / "b.db").exists()
    code, _, err = cli("postgresql://u@127.0.0.1:1/x", "db", "backup", str(tmp_path / "p.db"))
    assert (code, err) == (1, "error: db backup copies a SQLite store; back up PostgreSQL"
                                " with pg_dump\n")  # fmt: skip


def test_backup_refuses_symlinks_and_side_file_names(db_path: Path, tmp_path: Path) -> None:
    cli(db_path, "memories", "remember", "--user", "a", "The user likes tea.")
    nowhere = tmp_path / "nowhere" / "made.db"  # a dangling link's target: never created
    (tmp_path / "nowhere").mkdir()
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(nowhere)
    kept = tmp_path / "kept.db"
    kept.write_bytes(b"keep me")
    linked = tmp_path / "linked.db"
    linked.symlink_to(kept)
    (tmp_path / "taken.db-wal").write_bytes(b"another database's WAL")
    link_line = "is a symbolic link: give the path of a new file\n"
    cases = [
        (dangling, f"error: {dangling} {link_line}"),
        (linked, f"error: {linked} {link_line}"),
        (tmp_path / "copy.db-wal", f"error: {tmp_path}/copy.db-wal ends in -wal, a name SQLite"),
        (tmp_path / "copy.db-shm", f"error: {tmp_path}/copy.db-shm ends in -shm, a name SQLite"),
        (tmp_path / "copy-journal", f"error: {tmp_path}/copy-journal ends in -journal"),
        (tmp_path / "taken.db", f"error: {tmp_path}/taken.db-wal exists: give the path of a"),
    ]
    for target, message in cases:
        code, out, err = cli(db_path, "db", "backup", str(target))
        assert (code, out) == (1, "") and err.startswith(message), (target, err)
        assert err.count("\n") == 1
    assert not nowhere.exists() and not (tmp_path / "nowhere" / "made.db-wal").exists()
    assert kept.read_bytes() == b"keep me"
    for name in ("copy.db-wal", "copy.db-shm", "copy-journal", "taken.db"):
        assert not (tmp_path / name).exists()
    assert (tmp_path / "taken.db-wal").read_bytes() == b"another database's WAL"
    # A link in the folder part is fine: the folder is resolved, only the file must be new.
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    code, _, err = cli(db_path, "db", "backup", str(tmp_path / "via" / "copy.db"))
    assert code == 0, err
    assert (tmp_path / "real" / "copy.db").is_file()


# --------------------------------------------------------------------- logging


def test_json_log_lines_carry_the_same_fields() -> None:
    stream = io.StringIO()
    try:
        configure_logging(level="INFO", fmt="json", stream=stream)
        logging.getLogger("selfmind.test").info("stored %d memories", 3, extra={"user": "cli:a"})
        configure_logging(level="INFO", fmt="text", stream=stream)
        logging.getLogger("selfmind.test").info("stored %d memories", 4)
    finally:
        configure_logging(level="WARNING")
    first, second = stream.getvalue().splitlines()
    record = json.loads(first)
    assert {k: record[k] for k in ("level", "logger", "message", "user")} == {
        "level": "INFO",
        "logger": "selfmind.test",
        "message": "stored 3 memories",
        "user": "cli:a",
    }
    assert record["time"].endswith("+00:00")
    assert second.endswith(" INFO selfmind.test: stored 4 memories")


def test_http_client_request_lines_are_quiet_at_info_and_back_at_debug() -> None:
    stream = io.StringIO()
    try:
        configure_logging(level="INFO", stream=stream)
        logging.getLogger("httpx2").info("HTTP Request: POST /v1/messages 200")
        logging.getLogger("httpx2").warning("connection reset")
        configure_logging(level="DEBUG", stream=stream)
        logging.getLogger("httpx2").info("HTTP Request: POST /v1/messages 201")
    finally:
        configure_logging(level="WARNING")
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "WARNING httpx2: connection reset",
        "INFO httpx2: HTTP Request: POST /v1/messages 201",
    ]


def test_selfmind_log_format_json_makes_every_line_json(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    proc = selfmind("--db", str(db), "--log-level", "DEBUG", "memories", "remember",
                    "--user", "a", "The user likes tea.", cwd=tmp_path,
                    env={"SELFMIND_LOG_FORMAT": "json"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines
    for line in lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record)


# --------------------------------------------------------------------- start-up


def test_importing_the_cli_loads_no_model_or_platform_sdk() -> None:
    code = (
        "import sys, bots.cli; "
        "print([m for m in ('anthropic', 'slack_bolt', 'discord', 'numpy') if m in sys.modules])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


def test_bots_check_the_anthropic_key_before_network_and_database(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    unreachable = {
        "SLACK_API_URL": "http://127.0.0.1:9/",
        "DISCORD_API_BASE_URL": "http://127.0.0.1:9/api/v10",
    }
    runs = [
        ("slack", {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}),
        ("slack", {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "--http": ""}),
        ("discord", {"DISCORD_BOT_TOKEN": "abc"}),
    ]
    for command, env in runs:
        flags = [k for k in env if k.startswith("--")]
        env = {k: v for k, v in env.items() if not k.startswith("--")}
        proc = selfmind("--db", str(db), command, *flags, cwd=tmp_path,
                        env=unreachable | env | {"ANTHROPIC_API_KEY": ""})  # fmt: skip
        assert proc.returncode == 1
        assert proc.stderr.startswith("error: ANTHROPIC_API_KEY is not set: ")
        assert proc.stderr.count("\n") == 1
    assert not db.exists()


def test_port_out_of_range_is_a_usage_error_before_anything(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "ANTHROPIC_API_KEY": "sk-1"}
    env["SLACK_API_URL"] = "http://127.0.0.1:9/"
    proc = selfmind("--db", str(db), "slack", "--http", "--port", "99999", cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert "--port" in proc.stderr and "65535" in proc.stderr
    assert "Traceback" not in proc.stderr and not db.exists()


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("SELFMIND_SLACK_HTTP_PORT", "abc", "SELFMIND_SLACK_HTTP_PORT"),
        ("SELFMIND_SLACK_HTTP_PORT", "99999", "SELFMIND_SLACK_HTTP_PORT"),
        ("SELFMIND_DISCORD_EDIT_INTERVAL_S", "-1", "SELFMIND_DISCORD_EDIT_INTERVAL_S"),
        ("DISCORD_GUILD_ID", "abc", "DISCORD_GUILD_ID"),
        ("SELFMIND_LOG_FORMAT", "xml", "SELFMIND_LOG_FORMAT"),
    ],
)
def test_setting_errors_name_the_variable_in_one_line(
    tmp_path: Path, variable: str, value: str, named: str
) -> None:
    proc = selfmind("memories", "stats", cwd=tmp_path, env={variable: value})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {named}: ") and proc.stderr.count("\n") == 1


async def test_unreachable_slack_names_slack_api_url_only_when_it_was_set() -> None:
    import aiohttp

    settings = load_settings(slack_api_url="http://127.0.0.1:9/")
    async with aiohttp.ClientSession() as session:
        client, _ = web_clients(settings, "xoxb-1", session)
        client.retry_handlers = []
        with pytest.raises(ConfigError) as chosen:
            await authenticate(client, "http://127.0.0.1:9/")
        with pytest.raises(ConfigError) as default:
            await authenticate(client, DEFAULT_SLACK_API_URL)
    assert str(chosen.value).startswith("SLACK_API_URL: cannot reach Slack at http://127.0.0.1:9/")
    assert "SLACK_API_URL" not in str(default.value)
    assert str(default.value).startswith(f"cannot reach Slack at {DEFAULT_SLACK_API_URL}")


async def test_slack_starts_without_a_library_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        # As on a host that exports the token (Procfile, systemd): bolt reads it too.
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
        settings = slack_settings(slack, claude, tmp_path / "m.db")
        with caplog.at_level(logging.WARNING):
            async with running_bot(settings):
                pass
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_an_unexpected_error_is_one_line_with_the_traceback_at_debug(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    async def broken() -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    with caplog.at_level(logging.DEBUG, logger="bots.cli"), pytest.raises(typer.Exit) as exit_:
        run(broken())
    assert exit_.value.exit_code == 1
    assert capsys.readouterr().err == (
        "error: OperationalError: attempt to write a readonly database"
        " (--log-level DEBUG shows the traceback)\n"
    )
    assert [r.exc_info is not None for r in caplog.records if r.levelno == logging.DEBUG] == [True]


def test_a_read_only_database_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "ro.db"
    assert selfmind("--db", str(db), "memories", "remember", "--user", "a", "The user likes tea.",
                    cwd=tmp_path).returncode == 0  # fmt: skip
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed (needed to make the file immutable)")
    locked = subprocess.run(["chattr", "+i", str(db)], capture_output=True)
    if locked.returncode != 0:
        pytest.skip(f"chattr +i refused here: {locked.stderr.strip()!r}")
    try:
        proc = selfmind("--db", str(db), "memories", "remember", "--user", "a",
                        "The user likes coffee.", cwd=tmp_path)  # fmt: skip
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "readonly database" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_reindex_without_numpy_names_the_extra(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli(db, "memories", "remember", "--user", "a", "The user likes tea.")
    hide = (
        "import sys; sys.modules['sentence_transformers'] = None; "
        "sys.argv = ['selfmind', '--db', sys.argv[1], 'memories', 'reindex']; "
        "from bots.cli import main; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", hide, str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "SELFMIND_RECALL": "hybrid"},
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "error: memories reindex: this needs the semantic extra:"
        " pip install 'selfmind[semantic]' (see docs/memory.md)\n"
    )


# --------------------------------------------------------------------- garbage collector


def test_settle_heap_freezes_the_start_up_heap_once_and_raises_the_thresholds() -> None:
    code = textwrap.dedent("""
        import gc
        from bots.cli import GC_THRESHOLDS, settle_heap
        before = gc.get_threshold()
        settle_heap()
        frozen = gc.get_freeze_count()
        [object() for _ in range(10)]
        settle_heap()
        print(before, gc.get_threshold() == GC_THRESHOLDS, frozen, gc.get_freeze_count() == frozen)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    before, same, frozen, again = proc.stdout.rsplit(" ", 3)
    assert before == "(700, 10, 10)" and same == "True" and again == "True\n"
    assert int(frozen) > 10_000  # the imported modules, classes and schemas


@pytest.mark.parametrize("command", [["discord"], ["slack", "--http"], ["chat", "--user", "a"]])
def test_the_bot_commands_settle_the_heap_before_their_loop(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bots.cli

    calls: list[str] = []
    monkeypatch.setattr(bots.cli, "settle_heap", lambda: calls.append("settled"))
    monkeypatch.setattr(bots.cli, "run", lambda coro: (coro.close(), calls.append("run"), 0)[2])
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "t")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1-2-abc")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    result = runner.invoke(app, ["--db", str(tmp_path / "m.db"), *command])
    assert result.exit_code == 0, result.output
    assert calls == ["settled", "run"]
