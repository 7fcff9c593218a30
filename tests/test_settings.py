"""Settings: defaults from the design, every field in .env.example, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.settings import Settings, load_settings, normalize_db_url
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
    assert s.dedupe_threshold == 0.55
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


def test_db_urls(tmp_path: Path) -> None:
    assert normalize_db_url(str(tmp_path / "a.db")) == f"sqlite:///{tmp_path}/a.db"
    assert normalize_db_url(f"sqlite:///{tmp_path}/b.db") == f"sqlite:///{tmp_path}/b.db"
    assert normalize_db_url("postgresql://u@h/db") == "postgresql://u@h/db"
    for bad in ("", "mysql://x"):
        with pytest.raises(ConfigError, match="SELFMIND_DB"):
            normalize_db_url(bad)
