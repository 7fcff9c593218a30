"""Running the Slack bot in-process against the fake Slack and the fake Anthropic API."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bots.slack_bot.app import RunningSlackBot, open_slack_bot
from core.settings import Settings, load_settings
from core.store.database import database
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack_server import FakeSlack, JsonDict, render_markdown_text, shown_markdown
from tests.loop_helpers import API_KEY, memory_text

BOT_USER = "U0BOT"
TEAM = "T0SELFMIND"
PREFERENCE = "The user prefers answers in bullet points."


def slack_settings(slack: FakeSlack, claude: FakeAnthropic, db: Path, **overrides: Any) -> Settings:
    """Settings pointing at the fakes, with fast edits and a short shutdown."""
    values: dict[str, Any] = {
        "db": str(db),
        "anthropic_api_key": API_KEY,
        "anthropic_base_url": claude.base_url,
        "slack_bot_token": slack.bot_token,
        "slack_app_token": slack.app_token,
        "slack_signing_secret": slack.signing_secret,
        "slack_api_url": slack.api_url,
        "slack_http_host": "127.0.0.1",
        "slack_edit_interval_s": 0.05,
        "shutdown_timeout_s": 5.0,
    }
    return load_settings(**(values | overrides))


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a child ``selfmind`` process: this one's without any ANTHROPIC_,
    SELFMIND_ or SLACK_ setting, the repository on PYTHONPATH, the test API key, then
    ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "SELFMIND_", "SLACK_"))
    }
    env.update(PYTHONPATH=str(REPO_ROOT), ANTHROPIC_API_KEY=API_KEY)
    env.update(extra)
    return env


def slack_process_env(slack: FakeSlack, anthropic_base_url: str, **extra: str) -> dict[str, str]:
    """:func:`clean_env` for ``selfmind slack --http`` against the fakes (fast edits, INFO
    logs); ``extra`` overrides any of it."""
    values = {
        "ANTHROPIC_BASE_URL": anthropic_base_url,
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_SIGNING_SECRET": slack.signing_secret,
        "SLACK_API_URL": slack.api_url,
        "SELFMIND_SLACK_HTTP_HOST": "127.0.0.1",
        "SELFMIND_SLACK_EDIT_INTERVAL_S": "0.05",
        "SELFMIND_LOG_LEVEL": "INFO",
    }
    return clean_env(**(values | extra))


@asynccontextmanager
async def running_bot(settings: Settings, *, http: bool = True) -> AsyncIterator[RunningSlackBot]:
    """The bot as ``selfmind slack`` composes it; HTTP on a free port, or Socket Mode."""
    async with open_slack_bot(
        settings, db_url=database(settings.db).url, http=http, port=0 if http else None
    ) as running:
        yield running


async def settle(running: RunningSlackBot) -> None:
    """Let acknowledged work start, then wait until the bot has nothing in flight."""
    await asyncio.sleep(0.05)
    assert await running.bot.wait_idle(15)


def bot_posts(slack: FakeSlack, channel: str, thread_ts: str | None = None) -> list[JsonDict]:
    """Messages the bot posted in ``channel`` (in one thread when ``thread_ts`` is given)."""
    messages = slack.thread(channel, thread_ts) if thread_ts else slack.messages(channel)
    return [m for m in messages if m.get("user") == BOT_USER]


def shown_text(message: JsonDict) -> str:
    """What a person sees of a bot message's ``markdown_text`` or markdown blocks (mentions
    rendered, entities decoded: :func:`tests.fakes.slack_server.render_markdown_text`)."""
    return render_markdown_text(shown_markdown(message))[0]


def system_text(claude: FakeAnthropic, index: int = -1) -> str:
    """The memory block (second system block) of a chat request."""
    return memory_text(claude.requests_of("chat")[index].body)


def key(user: str) -> str:
    return f"slack:{TEAM}:{user}"


async def command(
    slack: FakeSlack, bot: RunningSlackBot, name: str, text: str = "", **kw: Any
) -> JsonDict:
    """Send a slash command; check the immediate empty ack; return the ephemeral answer."""
    started = time.monotonic()
    sent = await slack.send_slash_command(bot.events_url, name, text, **kw)
    assert (sent.status, sent.text) == (200, "")
    assert time.monotonic() - started < 3.0
    reply = await slack.wait_for_response(sent.sent["response_url"])
    assert reply.get("response_type", "ephemeral") == "ephemeral"
    return reply


async def click(
    slack: FakeSlack, bot: RunningSlackBot, action_id: str, value: str, *, user: str = "U1"
) -> JsonDict:
    payload = slack.events.block_actions(action_id, value, user=user)
    payload["user"]["team_id"] = TEAM
    sent = await slack.send_interaction(bot.events_url, payload)
    assert sent.status == 200
    return await slack.wait_for_response(payload["response_url"])


def buttons(reply: JsonDict) -> list[tuple[str, str]]:
    found = []
    for block in reply.get("blocks") or []:
        elements = block.get("elements", []) + (
            [block["accessory"]] if "accessory" in block else []
        )
        found += [(e["action_id"], e["value"]) for e in elements if e.get("type") == "button"]
    return found
