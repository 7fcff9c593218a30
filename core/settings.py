"""Settings: one frozen object built from the environment and settings files.

Where a setting comes from, first found wins (:func:`settings_files`):

1. the environment;
2. the file named by ``SELFMIND_ENV_FILE`` (an error when it names no file);
3. ``./.env`` in the working directory;
4. ``.env`` in the user's config directory (platformdirs: ``~/.config/selfmind/.env`` on
   Linux, ``$XDG_CONFIG_HOME/selfmind/.env`` when that is set).

The ``.env`` of the checkout SelfMind was installed from is read only as ``./.env``, when
run from that folder: an installed package has no checkout, and a command run from another
project's folder must not pick up this one's secrets by chance. The config directory's file
and ``SELFMIND_ENV_FILE`` are the places for settings that hold wherever it runs; a missing
key's message (:func:`missing`) names every place in order, and says so when the checkout's
``.env`` sets the key but is not read.

Every field is listed in ``.env.example``. SelfMind's own settings use the ``SELFMIND_``
prefix (``top_k`` is ``SELFMIND_TOP_K``); platform secrets keep their usual names
(``ANTHROPIC_API_KEY``, ``SLACK_BOT_TOKEN``, ``DISCORD_BOT_TOKEN`` ...).

Build it once with :func:`load_settings` in the composition root and pass it down; nothing
else reads the environment.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from dotenv import dotenv_values
from platformdirs import user_config_path
from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.errors import ConfigError

logger = logging.getLogger(__name__)

ENV_FILE_VARIABLE = "SELFMIND_ENV_FILE"
"""Names a settings file read before ``./.env`` (set it in the environment only)."""
DEFAULT_MODEL = "claude-opus-4-8"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"


def _split(value: object) -> object:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


CommaList = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split)]
"""A comma-separated list in the environment (``T1,T2``); empty means no restriction."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, name.lower())


_WINDOW = r"^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]$"
"""``HH:MM-HH:MM`` in UTC (a window may span midnight: ``23:00-04:00``)."""


class Settings(BaseSettings):
    """All of SelfMind's settings. Immutable; units are in the names."""

    model_config = SettingsConfigDict(
        env_prefix="SELFMIND_",
        env_file=None,  # load_settings passes settings_files()
        env_file_encoding="utf-8",
        # An empty value (``DISCORD_GUILD_ID=`` as .env.example has it) means "not set".
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
        populate_by_name=True,
    )

    # --- storage and recall
    db: str = Field(
        default="~/.selfmind/memory.db",
        description="file path, sqlite:/// or postgresql:// URL (core.store.database reads it)",
    )
    sqlite_synchronous: Literal["normal", "full"] = "full"
    recall: Literal["static", "bm25", "hybrid"] = "static"  # core/runtime.py open_recaller
    embedding_model_dir: str | None = None
    db_pool_size: int = Field(default=10, ge=1, le=100)
    top_k: int = Field(default=6, ge=1, le=50)
    # The standing profile's budget in every prompt (core.memory.profile): 800 tokens hold
    # about 50 standing memories of typical length (16 tokens a line) and keep the whole
    # memory block under 1,200 tokens with top_k = 6; 0 turns the profile off.
    profile_tokens: int = Field(default=800, ge=0, le=8000)
    dedupe_threshold: float = Field(default=0.5, gt=0.0, le=1.0)  # bench/dedupe.py
    recall_private_in_channels: bool = False
    # A channel's own memory (team memory, core.memory.team; opt-in per channel): the token
    # budget of its cached block in every answer there. 1,200 tokens hold about 50 entries
    # with their date and speaker (about 24 tokens a line), the decisions of a busy
    # channel's last months; it is cached after the persona, so later turns read it at a
    # tenth of the price, and recall finds older entries. 0: recall only, no block.
    channel_memory_tokens: int = Field(default=1200, ge=0, le=8000)
    # Who may turn a channel's memory on or off, in every channel (user keys such as
    # slack:T1:U1 or bare platform user ids, comma separated); empty: any member (on
    # Discord with the Manage Channels permission). A channel's own list: selfmind channels
    # memory on KEY --allow ...
    channel_memory_admins: str = ""

    # --- conversation
    history_turns: int = Field(default=12, ge=0, le=200)
    history_retention_days: int = Field(default=30, ge=1)
    max_concurrent_turns: int = Field(default=256, ge=1, le=10_000)  # core/chat/admission.py

    # --- files sent with a message (core/files): read for one turn, never kept
    file_max_mb: int = Field(default=20, ge=1, le=30)
    file_max_text_chars: int = Field(default=200_000, ge=1_000, le=2_000_000)
    file_download_timeout_s: float = Field(default=30.0, gt=0)
    # a PDF's page count runs in a child process killed at this deadline (core/files/prepare.py)
    file_parse_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # 100 MB: five files of the default 20 MB limit (three of the 30 MB maximum) held at
    # once, whatever the number of turns; bench/files.py measures what that costs.
    file_memory_mb: int = Field(default=100, ge=1, le=65_536)

    # --- Claude
    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=_env("ANTHROPIC_API_KEY")
    )
    anthropic_base_url: str | None = Field(
        default=None, validation_alias=_env("ANTHROPIC_BASE_URL")
    )
    chat_model: str = DEFAULT_MODEL
    reflection_model: str = DEFAULT_MODEL
    max_tokens: int = Field(default=16000, ge=1)
    memory_max_tokens: int = Field(default=1024, ge=1)
    anthropic_max_retries: int = Field(default=2, ge=0, le=10)
    anthropic_timeout_s: float = Field(default=600.0, gt=0)
    reflection_max_attempts: int = Field(default=3, ge=1, le=10)
    reflection_related_k: int = Field(default=10, ge=0, le=50)
    shutdown_timeout_s: float = Field(default=10.0, ge=0)
    reconnect_backoff_s: float = Field(default=1.0, gt=0)
    reconnect_backoff_max_s: float = Field(default=30.0, gt=0)

    # --- streaming replies
    slack_edit_interval_s: float = Field(default=1.0, gt=0)
    discord_edit_interval_s: float = Field(default=1.0, gt=0)
    slack_max_reply_chars: int = Field(default=3500, ge=200, le=12000)
    discord_max_reply_chars: int = Field(default=2000, ge=200, le=2000)
    slack_updates_per_minute: int = Field(default=50, ge=1)
    # native: chat.startStream/appendStream/stopStream in threads; edits: chat.update only
    slack_streaming: Literal["native", "edits"] = "native"

    # --- Slack
    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=_env("SLACK_BOT_TOKEN")
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=_env("SLACK_APP_TOKEN")
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias=_env("SLACK_SIGNING_SECRET")
    )
    slack_api_url: str = Field(
        default=DEFAULT_SLACK_API_URL, validation_alias=_env("SLACK_API_URL")
    )
    slack_memory_notes: bool = True
    slack_http_host: str = "0.0.0.0"
    slack_http_port: int = Field(default=3000, ge=0, le=65535)

    # --- Discord
    discord_bot_token: SecretStr | None = Field(
        default=None, validation_alias=_env("DISCORD_BOT_TOKEN")
    )
    discord_guild_id: int | None = Field(default=None, validation_alias=_env("DISCORD_GUILD_ID"))
    discord_api_base_url: str | None = Field(
        default=None, validation_alias=_env("DISCORD_API_BASE_URL")
    )
    discord_gateway_url: str | None = Field(
        default=None, validation_alias=_env("DISCORD_GATEWAY_URL")
    )
    discord_memory_reactions: bool = True

    # --- memory cleanup (selfmind memories cleanup; scheduled runs when the interval is > 0)
    cleanup_batch_size: int = Field(default=25, ge=2, le=100)
    cleanup_max_batches: int = Field(default=20, ge=1, le=1000)
    cleanup_interval_hours: float = Field(default=0.0, ge=0)
    cleanup_min_memories: int = Field(default=20, ge=2)

    # --- consolidation while quiet (off by default; core.memory.consolidation)
    consolidation: bool = False
    consolidation_window: str = Field(default="02:00-05:00", pattern=_WINDOW)
    consolidation_daily_tokens: int = Field(default=2_000_000, ge=1)

    # --- team controls (empty allow-list = everyone; 0 = no cap; days are UTC)
    allowed_slack_teams: CommaList = ()
    allowed_slack_channels: CommaList = ()
    allowed_discord_guilds: CommaList = ()
    allowed_discord_channels: CommaList = ()
    allowed_users: CommaList = ()
    user_daily_messages: int = Field(default=0, ge=0)
    user_daily_tokens: int = Field(default=0, ge=0)
    workspace_daily_messages: int = Field(default=0, ge=0)
    workspace_daily_tokens: int = Field(default=0, ge=0)

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    def require_model_key(self) -> str:
        """The Anthropic API key; ``ConfigError`` naming ``ANTHROPIC_API_KEY`` when it is not
        set (an empty value counts as not set)."""
        key = self.anthropic_api_key.get_secret_value().strip() if self.anthropic_api_key else ""
        if not key:
            raise missing(
                "ANTHROPIC_API_KEY",
                "your Anthropic API key (sk-ant-..., console.anthropic.com > API keys)",
            )
        return key

    # --- health and metrics (GET /healthz, GET /metrics); no port = no server, 0 = any free
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"


def env_name(field: str) -> str:
    """The variable a user sets for ``field``: ``SELFMIND_TOP_K`` or ``ANTHROPIC_API_KEY``."""
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return "SELFMIND_" + field.upper()


def user_env_file() -> Path:
    """The settings file in the user's config directory (``~/.config/selfmind/.env`` on
    Linux; the platform's convention elsewhere, via platformdirs)."""
    return user_config_path("selfmind", appauthor=False) / ".env"


def settings_files() -> tuple[Path, ...]:
    """The settings files to read, the one that wins first: ``SELFMIND_ENV_FILE``, ``./.env``,
    :func:`user_env_file`; those that exist. ``ConfigError`` when ``SELFMIND_ENV_FILE`` is set
    but names no readable file."""
    found: list[Path] = []
    named = os.environ.get(ENV_FILE_VARIABLE, "").strip()
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(f"{ENV_FILE_VARIABLE}: no settings file at {path}")
        found.append(path.resolve())
    for path in (Path(".env"), user_env_file()):
        if path.is_file() and path.resolve() not in found:
            found.append(path.resolve())
    return tuple(found)


CHECKOUT_ROOT: Path | None = None
"""Where :func:`missing` looks for a checkout (None: the folder holding ``core/``)."""


def settings_places() -> str:
    """Every place a setting is read from, in the order they win, as one phrase with this
    machine's paths: the environment, ``$SELFMIND_ENV_FILE``, ``./.env``, the config
    directory's ``.env`` (:func:`settings_files`)."""
    named = os.environ.get(ENV_FILE_VARIABLE, "").strip()
    env_file = f"the file ${ENV_FILE_VARIABLE} names ({named or 'not set'})"
    try:
        here = str(Path.cwd() / ".env")
    except OSError:  # the working directory was removed
        here = "./.env"
    return (
        f"the environment, then {env_file}, then ./.env in the folder selfmind runs from"
        f" ({here}), then {user_env_file()}; the first that sets it wins"
    )


def checkout_env_file(root: Path | None = None) -> Path | None:
    """The ``.env`` of the source checkout this SelfMind runs from (``root``: the folder
    holding ``core/``; an editable install), when there is one and it is not ``./.env``;
    None otherwise (an installed package has no checkout)."""
    root = root or Path(__file__).resolve().parents[1]
    path = root / ".env"
    if not (root / "pyproject.toml").is_file() or not path.is_file():
        return None
    if Path(".env").is_file() and Path(".env").resolve() == path:
        return None
    return path


def missing(name: str, what: str) -> ConfigError:
    """The error for a required setting ``name`` that is not set: put ``what`` there, in one
    of :func:`settings_places`; and when the checkout's ``.env`` sets it (not read from
    another folder: module docstring), how to make that count."""
    message = f"{name} is not set: put {what} in one of the places settings are read from:"
    message += f" {settings_places()}"
    checkout = checkout_env_file(CHECKOUT_ROOT)
    if checkout is not None:
        value = dotenv_values(checkout).get(name) or dotenv_values(checkout).get(name.lower())
        if value and value.strip():
            message += (
                f" (the checkout's {checkout} sets it, but is read only when selfmind runs from"
                f" {checkout.parent}: run it there, copy the line to {user_env_file()}, or"
                f" export {ENV_FILE_VARIABLE}={checkout})"
            )
    return ConfigError(message)


@dataclass(frozen=True)
class SettingSource:
    """A setting that is set: its variable, its value as read, where it came from
    (``environment``, a settings file's path, or ``--db`` for an option), and its field."""

    name: str
    value: str
    source: str
    secret: bool
    field: str = ""

    def is_default(self, settings: Settings) -> bool:
        """Whether ``settings`` (built from the same sources) holds this setting's default
        value: set, but to what it would be anyway (``SELFMIND_TOP_K=6``)."""
        info = Settings.model_fields.get(self.field)
        if info is None:
            return False
        return bool(getattr(settings, self.field) == info.get_default(call_default_factory=True))


def setting_sources(
    files: tuple[Path, ...], overrides: dict[str, object] | None = None
) -> list[SettingSource]:
    """Every setting that is set (not left at its default), in the order of
    :class:`Settings`' fields, with where its value came from (first found wins, as in
    :func:`load_settings`). Names are matched without regard to case, as the settings are."""
    environment = {k.upper(): v for k, v in os.environ.items() if v.strip()}
    read = [
        (str(path), {k.upper(): v for k, v in dotenv_values(path).items() if v and v.strip()})
        for path in files
    ]
    found: list[SettingSource] = []
    for field, info in Settings.model_fields.items():
        name = env_name(field)
        secret = "SecretStr" in str(info.annotation)
        if overrides and field in overrides:
            found.append(SettingSource(name, str(overrides[field]), f"--{field}", secret, field))
        elif name in environment:
            found.append(SettingSource(name, environment[name], "environment", secret, field))
        else:
            source = next(((where, values) for where, values in read if name in values), None)
            if source is not None:
                found.append(SettingSource(name, source[1][name], source[0], secret, field))
    return found


RETIRED = {
    "SELFMIND_FILE_CONCURRENCY": "SELFMIND_FILE_MEMORY_MB (a byte budget for files held at once)",
}
"""Settings an earlier SelfMind read and this one does not, with what replaced them."""
NOT_SETTINGS = frozenset(
    {
        ENV_FILE_VARIABLE,
        "SELFMIND_TEST_DATABASE_URL",
        "SELFMIND_BENCH_DATABASE_URL",
        "SELFMIND_LOCOMO_DIR",
    }
)
"""``SELFMIND_*`` names read by other parts than the settings: the settings file's own
variable, and the tests' and benchmarks' (docs/index.md)."""


def unknown_settings(files: tuple[Path, ...]) -> list[str]:
    """One line for each ``SELFMIND_*`` name set in the environment or in ``files`` that is
    no setting of this version (a typo, or a setting :data:`RETIRED`), in sorted order. The
    settings ignore such names, so without this line a mistyped one silently does nothing."""
    known = {env_name(field) for field in Settings.model_fields} | NOT_SETTINGS
    names = {k.upper() for k in os.environ}
    for path in files:
        names |= {k.upper() for k in dotenv_values(path)}
    lines = []
    for name in sorted(n for n in names if n.startswith("SELFMIND_") and n not in known):
        instead = RETIRED.get(name)
        lines.append(
            f"{name} is no longer read: use {instead}"
            if instead
            else f"{name} is not a SelfMind setting (see .env.example); it is ignored"
        )
    return lines


def load_settings(**overrides: object) -> Settings:
    """Build the settings from the environment and :func:`settings_files` (first found
    wins); overrides win over both.

    Raises ``ConfigError`` naming the first invalid variable as the user sets it
    (``SELFMIND_SLACK_HTTP_PORT``, ``ANTHROPIC_API_KEY``) and what it expects, or
    ``SELFMIND_ENV_FILE`` when it names no file.
    """
    files = settings_files()
    for line in unknown_settings(files):
        logger.warning("%s", line)  # names only, never a value
    try:
        # pydantic-settings lets a later file win: pass them least important first.
        env_files = tuple(reversed(files)) or None
        return Settings(_env_file=env_files, **overrides)  # type: ignore[call-arg,arg-type]
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = str(err["loc"][0]) if err["loc"] else "?"
        field = next(
            (n for n in Settings.model_fields if loc in (n, env_name(n), env_name(n).lower())),
            loc,
        )
        name = env_name(field)
        where = next((s.source for s in setting_sources(files, overrides) if s.name == name), None)
        fix = f"set in {where}: fix it there" if where else "fix it where it is set"
        raise ConfigError(f"{name}: {err['msg']} ({fix})") from None
