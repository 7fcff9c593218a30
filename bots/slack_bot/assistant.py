"""Agent conversations: the Messages tab's greeting and suggested prompts.

Slack's Agent messaging experience (manifest ``agent_view``; docs.slack.dev, "Migrating to
the Agent messaging experience"): when a person opens the app's Messages tab
(``app_home_opened`` with ``tab == "messages"``), or, for an app still on the legacy
``assistant_view``, starts an assistant thread (``assistant_thread_started``), the bot

- greets them once, with the privacy line of the first DM (:data:`bots.slack_bot.events.DM_NOTICE`;
  the same once-mark as that notice, so nobody reads it twice), and
- sets up to :data:`MAX_PROMPTS` suggested prompts (``assistant.threads.setSuggestedPrompts``;
  without ``thread_ts`` in the Messages tab: Slack silently ignores a call with one from an
  agent app; slack_bolt 1.30 offers it on any DM), drawn from
  what it remembers about them (:func:`suggested_prompts`), generic ones otherwise.

Outside the allow-lists (:mod:`core.chat.controls`, the rule messages and commands follow)
nothing is posted or suggested: the person's first DM is answered with
:data:`~core.chat.controls.NOT_ENABLED`, as any DM there is. With memory off the prompts are
the generic ones. The prompts and the greeting are cosmetic: a Slack error is logged, never
raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

from aiohttp import ClientError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot.blocks import JsonDict
from bots.slack_bot.commands import slack_place, user_key
from bots.slack_bot.events import DM_NOTICE
from core.chat.controls import Controls
from core.memory.service import MemoryService
from core.store.seams import Store
from core.types import Memory

logger = logging.getLogger(__name__)

MAX_PROMPTS = 4
"""Slack shows at most four suggested prompts (docs.slack.dev,
``assistant.threads.setSuggestedPrompts``)."""
MAX_PROMPT_MESSAGE_CHARS = 300
PROMPTS_TITLE = "Try asking"
GREETING = "Hi! I'm SelfMind. Ask me anything here, or pick one of the suggestions.\n\n"

RECALL_PROMPT = {
    "title": "What do you remember about me?",
    "message": "What do you remember about me?",
}
GENERIC_PROMPTS = (
    {"title": "What can you do?", "message": "What can you help me with?"},
    {
        "title": "How does your memory work?",
        "message": "How does your memory of me work, and how do I control it?",
    },
    {"title": "Help me plan my week", "message": "Help me plan my week."},
    {"title": "Explain something", "message": "Explain a concept I should know for my work."},
)
PROJECT_KINDS = ("context",)
PROJECT_CATEGORIES = ("code", "workflow", "tools")


def suggested_prompts(memories: Sequence[Memory]) -> list[dict[str, str]]:
    """Up to :data:`MAX_PROMPTS` ``{"title", "message"}`` prompts for a person whose
    newest memories are ``memories`` (newest first): when something is known, "What do you
    remember about me?", their most recent project (the newest ``context`` memory, else the
    newest about code, workflow or tools), how they like answers (a preference); generic
    prompts fill the rest."""
    prompts: list[dict[str, str]] = []
    if memories:
        prompts.append(RECALL_PROMPT)
        project = next((m for m in memories if m.kind in PROJECT_KINDS), None) or next(
            (m for m in memories if m.category in PROJECT_CATEGORIES), None
        )
        if project is not None:
            message = f"Let's continue with my most recent work. You noted: {project.text}"
            prompts.append(
                {
                    "title": "Pick up my latest project",
                    "message": message[:MAX_PROMPT_MESSAGE_CHARS],
                }
            )
        if any(m.kind == "preference" for m in memories):
            prompts.append(
                {
                    "title": "How do I like my answers?",
                    "message": "From what you remember, how do I like my answers?",
                }
            )
    for generic in GENERIC_PROMPTS:
        if len(prompts) >= MAX_PROMPTS:
            break
        prompts.append(generic)
    return prompts[:MAX_PROMPTS]


class SlackAssistant:
    """The Messages tab's greeting and suggested prompts over one store."""

    RECENT = 20
    """The newest memories the prompts are drawn from."""

    def __init__(
        self,
        *,
        service: MemoryService,
        store: Store,
        client: AsyncWebClient,
        install_id: str,
        controls: Controls | None = None,
    ) -> None:
        self.service = service
        self.store = store
        self.client = client
        self.install_id = install_id
        self.controls = controls

    async def open_messages(
        self, *, user: str, channel: str, thread_ts: str | None = None, team: str = ""
    ) -> None:
        """The person opened the Messages tab (``channel``: their DM with the bot) or an
        assistant thread (``thread_ts``): greet once, set the prompts; ``team``: the
        workspace the event came from (the allow-lists')."""
        key = user_key(self.install_id, user)
        place = slack_place(key=key, team=team or self.install_id, channel=None)
        if self.controls is not None and not self.controls.allows(place):
            logger.info("messages tab of %s not set up: outside the allow-lists", key)
            return
        try:
            if await self.store.mark_once(mark=f"slack-dm-notice:{key}"):
                await self.client.chat_postMessage(
                    channel=channel,
                    thread_ts=thread_ts,
                    markdown_text=GREETING + DM_NOTICE.strip(),
                )
                logger.info("greeted user=%s in the messages tab", key)
            mode = await self.store.get_mode(user_key=key)
            recent = (
                []
                if mode == "off"
                else await self.service.list_memories(user_key=key, limit=self.RECENT)
            )
            prompts = suggested_prompts(recent)
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, title=PROMPTS_TITLE, prompts=prompts
            )
            logger.info("suggested %d prompts to user=%s", len(prompts), key)
        except (SlackApiError, ClientError) as exc:
            logger.warning("messages tab of %s not set up: %s", key, type(exc).__name__)

    async def on_app_home_opened(self, event: JsonDict, *, team: str = "") -> None:
        """``app_home_opened`` with ``tab == "messages"``."""
        user, channel = event.get("user"), event.get("channel")
        if user and channel:
            await self.open_messages(user=str(user), channel=str(channel), team=team)

    async def on_thread_started(self, event: JsonDict, *, team: str = "") -> None:
        """``assistant_thread_started``: the thread in ``event.assistant_thread``."""
        thread = event.get("assistant_thread")
        if not isinstance(thread, dict):
            return
        thread = cast(JsonDict, thread)
        user, channel = thread.get("user_id"), thread.get("channel_id")
        thread_ts = thread.get("thread_ts")
        if user and channel and thread_ts:
            await self.open_messages(
                user=str(user), channel=str(channel), thread_ts=str(thread_ts), team=team
            )
