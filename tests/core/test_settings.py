"""Settings: defaults from the design, every field in .env.example, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.settings import (
    Settings,
    load_settings,
    settings_files,
    unknown_settings,
)
from tests.conftest import REPO_ROOT


def env_name(name: str) -> str:
    field = Settings.model_fields[name]
    alias = field.validation_alias
    if alias is not None:
        return str(alias.choices[0])  # type: ignore[union-attr]
    return "SELFMIND_" + name.upper()


def test_every_setting_is_in_env_example() -> None:
    text = (REPO_ROOT / ".env.example").read_text(encoding="utf-8")
    listed = set(re.findall(r"^([A-Z_]+)=", text, flags=re.M))
    expected = {env_name(n) for n in Settings.model_fields}
    assert expected == listed


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(env_name(name), raising=False)
    s = load_settings()
    assert (s.top_k, s.history_turns, s.max_tokens, s.memory_max_tokens) == (6, 12, 16000, 1024)
    assert s.dedupe_threshold == 0.5
    assert s.chat_model == s.reflection_model == "claude-opus-4-8"
    assert s.recall_private_in_channels is False
    assert s.history_retention_days == 30


def test_env_and_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("SELFMIND_TOP_K=9\nANTHROPIC_API_KEY=sk-test\n")
    monkeypatch.delenv("SELFMIND_TOP_K", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    s = load_settings()
    assert s.top_k == 9
    assert s.anthropic_api_key is not None
    assert "sk-test" not in repr(s)  # secrets never print
    monkeypatch.setenv("SELFMIND_TOP_K", "3")
    assert load_settings().top_k == 3
    with pytest.raises(Exception):  # noqa: B017, PT011 - frozen
        s.top_k = 1  # type: ignore[misc]


def test_invalid_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SELFMIND_DEDUPE_THRESHOLD", "2")
    with pytest.raises(ConfigError, match=r"^SELFMIND_DEDUPE_THRESHOLD"):
        load_settings()


def test_empty_values_mean_not_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.setenv(env_name(name), "")
    s = load_settings()
    assert s == Settings.model_construct(**{n: f.default for n, f in Settings.model_fields.items()})
    assert s.anthropic_api_key is None and s.discord_guild_id is None
    assert s.allowed_users == () and s.slack_http_port == 3000


def test_an_empty_anthropic_key_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=\n")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    s = load_settings()
    assert s.anthropic_api_key is None
    with pytest.raises(ConfigError, match=r"^ANTHROPIC_API_KEY is not set: "):
        s.require_model_key()
    assert load_settings(anthropic_api_key="sk-x").require_model_key() == "sk-x"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SELFMIND_SLACK_HTTP_PORT", "abc"),
        ("SELFMIND_SLACK_HTTP_PORT", "99999"),
        ("SELFMIND_DISCORD_EDIT_INTERVAL_S", "-1"),
        ("SELFMIND_SLACK_MAX_REPLY_CHARS", "5"),
        ("SELFMIND_RECALL", "magic"),
        ("SELFMIND_LOG_FORMAT", "xml"),
        ("SELFMIND_MAX_CONCURRENT_TURNS", "0"),
        ("SELFMIND_MAX_CONCURRENT_TURNS", "many"),
        ("SELFMIND_SLACK_STREAMING", "sometimes"),
        ("DISCORD_GUILD_ID", "abc"),
        ("ANTHROPIC_ANTHROPIC_TIMEOUT_S", None),
    ],
)
def test_errors_name_the_variable_the_user_sets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str | None
) -> None:
    monkeypatch.chdir(tmp_path)
    if value is None:  # a field name that looks like a platform prefix keeps SELFMIND_
        variable, value = "SELFMIND_ANTHROPIC_TIMEOUT_S", "0"
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{variable}: ")
    assert message.endswith("(set in environment: fix it there)")


def test_an_invalid_value_names_the_file_it_is_set_in(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SELFMIND_TOP_K", raising=False)
    (tmp_path / ".env").write_text("SELFMIND_TOP_K=lots\n")
    with pytest.raises(
        ConfigError, match=rf"^SELFMIND_TOP_K: .* \(set in {tmp_path / '.env'}: fix"
    ):
        load_settings()


def test_a_missing_key_names_every_place_in_the_order_they_win(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from core.settings import settings_places, user_env_file

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SELFMIND_ENV_FILE", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        load_settings().require_model_key()
    message = str(caught.value)
    assert message.startswith("ANTHROPIC_API_KEY is not set: put your Anthropic API key")
    places = [
        "the environment",
        "the file $SELFMIND_ENV_FILE names (not set)",
        f"./.env in the folder selfmind runs from ({tmp_path / '.env'})",
        str(tmp_path / "config" / "selfmind" / ".env"),
        "the first that sets it wins",
    ]
    at = [message.index(place) for place in places]
    assert at == sorted(at), message
    assert user_env_file() == tmp_path / "config" / "selfmind" / ".env"
    monkeypatch.setenv("SELFMIND_ENV_FILE", str(tmp_path / "team.env"))
    assert f"names ({tmp_path / 'team.env'})" in settings_places()


def test_a_key_in_the_checkouts_env_is_not_read_elsewhere_and_the_message_says_how(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Decided: the checkout's .env counts only as ./.env (docs/configuration.md); from
    another folder the message names it and the three ways to make it count."""
    import core.settings as settings_module
    from core.settings import checkout_env_file

    checkout, elsewhere = tmp_path / "selfmind", tmp_path / "elsewhere"
    (checkout / "core").mkdir(parents=True)
    elsewhere.mkdir()
    (checkout / "pyproject.toml").write_text("[project]\n")
    (checkout / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-in-the-checkout\n")
    monkeypatch.setattr(settings_module, "CHECKOUT_ROOT", checkout)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SELFMIND_ENV_FILE", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(elsewhere)
    assert load_settings().anthropic_api_key is None  # not read from another folder
    with pytest.raises(ConfigError) as caught:
        load_settings().require_model_key()
    message = str(caught.value)
    assert f"the checkout's {checkout / '.env'} sets it" in message
    assert f"export SELFMIND_ENV_FILE={checkout / '.env'}" in message
    assert str(tmp_path / "config" / "selfmind" / ".env") in message
    assert "sk-ant-in-the-checkout" not in message  # never the value
    monkeypatch.chdir(checkout)  # from the checkout it is ./.env, and read
    assert checkout_env_file(checkout) is None
    assert load_settings().require_model_key() == "sk-ant-in-the-checkout"
    (checkout / "pyproject.toml").unlink()  # not a checkout: an installed package
    monkeypatch.chdir(elsewhere)
    assert checkout_env_file(checkout) is None


def test_env_example_copied_as_is_runs_every_command(tmp_path: Path) -> None:
    """The README's ``cp .env.example .env``, then every command, HOME in a temp folder."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "home").mkdir()
    (tmp_path / ".env").write_text((REPO_ROOT / ".env.example").read_text(encoding="utf-8"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_"))
    }
    env.update(PYTHONPATH=str(REPO_ROOT), HOME=str(tmp_path / "home"))
    db = tmp_path / "home" / ".selfmind" / "memory.db"  # SELFMIND_DB of .env.example

    def selfmind(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bots.cli", *args],
            capture_output=True, text=True, cwd=tmp_path, env=env, input=stdin, timeout=120,
        )  # fmt: skip

    dump = tmp_path / "dump.jsonl"
    no_key = "error: ANTHROPIC_API_KEY is not set: "
    runs: list[tuple[list[str], int, str]] = [
        (["--help"], 0, ""),
        (["--version"], 0, ""),
        (["memories", "remember", "--user", "alice", "The user likes tea."], 0, ""),
        (["memories", "list", "--user", "alice"], 0, ""),
        (["memories", "search", "tea", "--user", "alice"], 0, ""),
        (["memories", "stats"], 0, ""),
        (["memories", "history", "--user", "alice"], 0, ""),
        (["memories", "export", "--user", "alice"], 0, ""),
        (["memories", "import", str(dump), "--user", "bob"], 0, ""),
        (["memories", "forget", "--user", "alice", "1"], 0, ""),
        (["memories", "cleanup", "--user", "bob", "--dry-run"], 1, no_key),
        (["memories", "undo", "--user", "bob", "c-none"], 1, "error: "),
        (["usage"], 0, ""),
        (["users"], 0, ""),
        (["chat", "--user", "alice"], 0, ""),
        (["discord"], 1, "error: DISCORD_BOT_TOKEN is not set: "),
        (["slack"], 1, "error: SLACK_BOT_TOKEN is not set: "),
        (["db", "migrate"], 0, ""),
        (["db", "backup", str(tmp_path / "backup.db")], 0, ""),
        (["db", "copy", "--from", str(db), "--to", "postgresql://x@127.0.0.1:9/x"], 1, "error: "),
    ]  # fmt: skip
    # reindex embeds for the default recall (static embeddings: numpy only).
    runs.append((["memories", "reindex"], 0, ""))
    for args, code, err in runs:
        if args[:2] == ["memories", "import"]:
            dump.write_text(selfmind("memories", "export", "--user", "alice").stdout)
        proc = selfmind(*args, stdin="/memories\n" if args[0] == "chat" else "")
        where = f"selfmind {' '.join(args)}: {proc.stderr!r}"
        assert proc.returncode == code, where
        assert proc.stderr.startswith(err), where
        assert "Input should" not in proc.stderr and "Traceback" not in proc.stderr, where
        if code:
            assert proc.stderr.count("\n") == 1, where
    assert db.exists()
    listed = json.loads(selfmind("--db", str(tmp_path / "backup.db"), "users", "--json").stdout)
    assert [u["user"] for u in listed] == ["cli:alice", "cli:bob"]


# ---------------------------------------------------------------- where settings come from
@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from a folder of its own, with a config directory of the test's."""
    for name in ("SELFMIND_TOP_K", "SELFMIND_DB", "SELFMIND_ENV_FILE", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def test_settings_from_selfmind_env_file_run_from_another_directory(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import settings_files, user_env_file

    team = elsewhere / "srv" / "selfmind.env"
    team.parent.mkdir()
    team.write_text(f"SELFMIND_TOP_K=9\nSELFMIND_DB={elsewhere / 'team.db'}\n")
    monkeypatch.setenv("SELFMIND_ENV_FILE", str(team))
    s = load_settings()
    assert (s.top_k, s.db) == (9, str(elsewhere / "team.db"))
    # First found wins: the environment, SELFMIND_ENV_FILE, ./.env, the config directory.
    user_env_file().parent.mkdir(parents=True)
    user_env_file().write_text("SELFMIND_TOP_K=2\nSELFMIND_HISTORY_TURNS=3\n")
    Path(".env").write_text("SELFMIND_TOP_K=4\nSELFMIND_MEMORY_MAX_TOKENS=5\n")
    assert settings_files() == (team, (elsewhere / "elsewhere" / ".env"), user_env_file())
    s = load_settings()
    assert (s.top_k, s.memory_max_tokens, s.history_turns) == (9, 5, 3)
    monkeypatch.setenv("SELFMIND_TOP_K", "7")
    assert load_settings().top_k == 7


def test_selfmind_env_file_naming_no_file_is_one_error(
    elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SELFMIND_ENV_FILE", str(elsewhere / "missing.env"))
    with pytest.raises(ConfigError, match=r"^SELFMIND_ENV_FILE: no settings file at .*missing"):
        load_settings()


def test_the_config_directory_is_read_from_any_directory(elsewhere: Path) -> None:
    """The bug: run from elsewhere (systemd, cron), ``.env`` was ignored, SELFMIND_DB with it,
    and a second, empty store opened. Two real processes in two folders share one store."""
    import os
    import subprocess
    import sys

    config = elsewhere / "config" / "selfmind"
    config.mkdir(parents=True)
    db = elsewhere / "data" / "memory.db"
    (config / ".env").write_text(f"SELFMIND_DB={db}\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SELFMIND_", "ANTHROPIC_", "SLACK_", "DISCORD_"))
    }
    env.update(PYTHONPATH=str(REPO_ROOT), HOME=str(elsewhere / "home"))
    env["XDG_CONFIG_HOME"] = str(elsewhere / "config")

    def selfmind(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        cwd.mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, "-m", "bots.cli", *args],
            capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
        )  # fmt: skip

    added = selfmind(elsewhere / "a", "memories", "remember", "--user", "al", "The user likes tea.")
    assert added.returncode == 0, added.stderr
    listed = selfmind(elsewhere / "b", "memories", "list", "--user", "al")
    assert listed.returncode == 0 and "The user likes tea." in listed.stdout, listed.stderr
    assert db.exists() and not (elsewhere / "home" / ".selfmind").exists()


def test_a_retired_or_mistyped_setting_is_named_never_its_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The settings ignore names they do not know, so an upgrade that retires one (or a
    typo) would silently change nothing: each is named once at load, with what replaced it,
    and ``selfmind doctor`` lists them; the values are never shown."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("SELFMIND_FILE_CONCURRENCY=4\nSELFMIND_TOPK=9\n")
    monkeypatch.setenv("SELFMIND_TEST_DATABASE_URL", "postgresql://x@127.0.0.1/test")
    monkeypatch.setenv("selfmind_histroy_turns", "s3cr3t-value")
    with caplog.at_level("WARNING", logger="core.settings"):
        settings = load_settings()
    assert settings.top_k == 6  # the typo set nothing
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "SELFMIND_FILE_CONCURRENCY is no longer read: use SELFMIND_FILE_MEMORY_MB"
        " (a byte budget for files held at once)",
        "SELFMIND_HISTROY_TURNS is not a SelfMind setting (see .env.example); it is ignored",
        "SELFMIND_TOPK is not a SelfMind setting (see .env.example); it is ignored",
    ]
    assert not any("s3cr3t" in line or "=4" in line for line in lines)
    assert unknown_settings(settings_files()) == lines


@pytest.mark.parametrize("value", ["0", "-5", "lots", "1e9", "100000"])
def test_a_bad_file_memory_budget_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SELFMIND_FILE_MEMORY_MB", value)
    with pytest.raises(
        ConfigError, match=r"^SELFMIND_FILE_MEMORY_MB: .*\(set in environment: fix it there\)"
    ):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SELFMIND_CHANNEL_MEMORY_TOKENS", "-1"),
        ("SELFMIND_CHANNEL_MEMORY_TOKENS", "lots"),
        ("SELFMIND_CHANNEL_MEMORY_TOKENS", "99999"),
        ("SELFMIND_FILE_PARSE_TIMEOUT_S", "0"),
        ("SELFMIND_FILE_PARSE_TIMEOUT_S", "forever"),
        ("SELFMIND_CONSOLIDATION_WINDOW", "2am-5am"),
        ("SELFMIND_CONSOLIDATION_DAILY_TOKENS", "0"),
        ("SELFMIND_CONSOLIDATION", "sometimes"),
    ],
)
def test_a_bad_team_memory_file_or_consolidation_setting_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """The settings this stop added refuse a bad value in one line naming the variable and
    where it is set, as every other setting does."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=rf"^{name}: .*\(set in environment: fix it there\)"):
        load_settings()
