"""``selfmind doctor``: what this installation reads and reaches, in one screen.

It prints the settings files read (:func:`core.settings.settings_files`), every setting that
is set and where it came from (secrets cut to their first characters), where the database
is and its schema state (:mod:`core.store.schema`), then one line per service with what it
answered: Anthropic (``count_tokens``, free), Slack (``auth.test``, and
``apps.connections.open`` for an app token), Discord (``GET /users/@me``) and PostgreSQL
(``SELECT version()``). A service whose setting is not set is skipped, not failed. Exit 0
when nothing failed; else 1, the first failure's fix on stderr. It writes nothing: a
missing database stays missing, and no migration is applied.
"""

from __future__ import annotations

import asyncio
import os
import platform
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import SelfMindError
from core.settings import (
    DEFAULT_SLACK_API_URL,
    ENV_FILE_VARIABLE,
    Settings,
    SettingSource,
    unknown_settings,
    user_env_file,
)
from core.store.database import Database, mask_url

TIMEOUT_S = 10.0
"""How long one service may take to answer."""
DISCORD_API = "https://discord.com/api/v10"


@dataclass(frozen=True)
class Check:
    """One line of the report: ``ok`` True (answered well), False (the line to fix) or None
    (not configured, skipped)."""

    name: str
    ok: bool | None
    answer: str

    def line(self) -> str:
        mark = {True: "ok  ", False: "FAIL", None: "-   "}[self.ok]
        return f"  {mark} {self.name}: {self.answer}"


def mask(value: str) -> str:
    """A secret cut to its first characters (at most 6, and at most a quarter of it)."""
    keep = min(6, len(value) // 4)
    return f"{value[:keep]}… ({len(value)} characters)"


def shown(source: SettingSource) -> str:
    if source.secret:
        return mask(source.value)
    if source.name == "SELFMIND_DB":
        return mask_url(source.value)
    return source.value


def report_settings(
    files: tuple[Path, ...], sources: list[SettingSource], settings: Settings | None = None
) -> list[str]:
    """The settings files (read or absent), then every setting that differs from its
    default with its source, and how many more are set to their default values (a copied
    ``.env.example`` sets every one of them: listing those would bury the few that matter).
    Without ``settings``, every setting that is set is listed."""
    named = os.environ.get(ENV_FILE_VARIABLE, "").strip()
    candidates = [Path(named).expanduser()] if named else []
    candidates += [Path(".env"), user_env_file()]
    lines = ["settings files, the first to set a value wins (the environment wins over all):"]
    for path in candidates:
        full = path.resolve()
        state = "read  " if full in files else "absent"
        why = f"  (${ENV_FILE_VARIABLE})" if named and path is candidates[0] else ""
        lines.append(f"  {state} {full}{why}")
    if not named:
        lines.append(f"  (${ENV_FILE_VARIABLE} is not set)")
    if not sources:
        lines += [
            "settings that differ from their defaults:",
            "  none (every setting has its default)",
        ]
    else:
        as_default = [s for s in sources if settings is not None and s.is_default(settings)]
        differ = [s for s in sources if s not in as_default]
        lines.append("settings that differ from their defaults:")
        lines += [f"  {s.name}={shown(s)}  ({s.source})" for s in differ] or ["  none"]
        if as_default:
            lines.append(
                f"  ({len(as_default)} more set to their default values, not shown; every"
                " other setting is not set and has its default)"
            )
    lines += [f"  warning: {line}" for line in unknown_settings(files)]
    return lines


async def check_database(db: Database) -> Check:
    """The store's schema state, read only."""
    from core.store.database import read_schema, server_version

    name, where = db.label, db.where
    state = await read_schema(db)
    if state is None:
        return Check(
            name,
            True,
            f"{where}: not created yet (the first command that stores something creates it)",
        )
    version = await server_version(db)
    if version is not None:
        where = f"{where}, {version}"
    if state.unknown:
        return Check(name, False, f"{where}: {state.describe()}: upgrade SelfMind")
    if state.pending and not state.fresh:
        return Check(name, False, f"{where}: {state.describe()}: run selfmind db migrate")
    return Check(name, True, f"{where}: schema {state.describe()}")


async def check_anthropic(settings: Settings) -> Check:
    from core.model.claude import ClaudeChatModel

    if settings.anthropic_api_key is None:
        return Check(
            "Anthropic", None, "ANTHROPIC_API_KEY is not set (the chat's / commands work without)"
        )
    where = settings.anthropic_base_url or "https://api.anthropic.com"
    async with ClaudeChatModel.from_settings(settings) as model:
        answers = []
        for name in dict.fromkeys((settings.chat_model, settings.reflection_model)):
            try:
                tokens = await model.probe(model=name, timeout_s=TIMEOUT_S)
            except SelfMindError as exc:
                return Check("Anthropic", False, f"{where} for {name}: {exc.user_message} ({exc})")
            answers.append(f"{name} counted {tokens} tokens")
    return Check("Anthropic", True, f"{where}: key accepted; {', '.join(answers)}")


async def check_slack(settings: Settings) -> Check:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from bots.slack_bot.app import authenticate
    from bots.slack_bot.sink import slack_error

    if settings.slack_bot_token is None:
        return Check("Slack", None, "SLACK_BOT_TOKEN is not set")
    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=settings.slack_api_url,
        timeout=int(TIMEOUT_S),
    )
    try:
        identity = await authenticate(client, settings.slack_api_url)
    except SelfMindError as exc:
        return Check("Slack", False, str(exc))
    answer = f"auth.test: bot {identity.user_id} in workspace {identity.team_id}"
    if settings.slack_api_url != DEFAULT_SLACK_API_URL:
        answer += f" at {settings.slack_api_url}"
    if settings.slack_app_token is not None:
        try:
            await client.apps_connections_open(
                app_token=settings.slack_app_token.get_secret_value()
            )
        except SlackApiError as exc:
            return Check(
                "Slack", False, f"SLACK_APP_TOKEN was refused by Slack ({slack_error(exc)})"
            )
        answer += "; apps.connections.open: app token accepted (Socket Mode)"
    return Check("Slack", True, answer)


async def check_discord(settings: Settings) -> Check:
    import aiohttp

    if settings.discord_bot_token is None:
        return Check("Discord", None, "DISCORD_BOT_TOKEN is not set")
    base = (settings.discord_api_base_url or DISCORD_API).rstrip("/")
    headers = {"Authorization": f"Bot {settings.discord_bot_token.get_secret_value()}"}
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{base}/users/@me", headers=headers) as response,
        ):
            if response.status == 401:
                return Check(
                    "Discord",
                    False,
                    "DISCORD_BOT_TOKEN was refused by Discord (401): copy the bot token again"
                    " from the Developer Portal (your application > Bot > Reset Token)",
                )
            if response.status != 200:
                return Check("Discord", False, f"{base}/users/@me answered {response.status}")
            me = await response.json()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return Check(
            "Discord",
            False,
            f"cannot reach {base} ({type(exc).__name__}): check the network"
            + (" and DISCORD_API_BASE_URL" if settings.discord_api_base_url else ""),
        )
    return Check("Discord", True, f"GET /users/@me: bot {me.get('username')} ({me.get('id')})")


async def guarded(name: str, check: Callable[[], Awaitable[Check]]) -> Check:
    """``check()``, any error or a timeout as a failed line of its own."""
    try:
        return await asyncio.wait_for(check(), TIMEOUT_S + 5)
    except TimeoutError:
        return Check(name, False, f"no answer within {TIMEOUT_S + 5:.0f} s")
    except SelfMindError as exc:
        return Check(name, False, str(exc))
    except Exception as exc:  # the report goes on; the line says what happened
        return Check(name, False, f"{type(exc).__name__}: {' '.join(str(exc).split())}")


async def run_checks(settings: Settings, db: Database) -> list[Check]:
    """The database line and one line per service, checked at once."""
    return list(
        await asyncio.gather(
            guarded(db.label, lambda: check_database(db)),
            guarded("Anthropic", lambda: check_anthropic(settings)),
            guarded("Slack", lambda: check_slack(settings)),
            guarded("Discord", lambda: check_discord(settings)),
        )
    )


def header() -> str:
    from core.store.schema import app_version

    return f"selfmind {app_version()}, Python {platform.python_version()}"
