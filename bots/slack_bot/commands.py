"""Slack slash commands, their buttons, and the ephemeral "I'll remember" notes.

Commands (acknowledged at once, ``/remember`` once its memory is stored; answered through
``response_url`` as ephemeral messages, so only the caller sees them; memory listings never
go to a channel; a command whose store fails answers :data:`core.errors.NOT_SAVED_COMMAND`)::

    /remember TEXT                      store a memory (through dedupe)
    /forget ID | /forget all            forget one of your memories, or all (after a confirm)
    /memories [search QUERY | export]   newest first with ids, 10 a page; search; JSON Lines
                                        file sent to your DM
    /memories cleanup                   a cleanup plan to apply or cancel (bots.slack_bot.cleanup)
    /memory pause | resume | off | on   paused: recall only; off: neither recall nor learn
    /memories channel ... | /remember channel TEXT | /memory channel on|off
                                        this channel's own memory (core.memory.team_commands):
                                        a change is posted in the channel (in_channel)

Every operation acts for the user who typed the command or clicked the button
(``slack:{team_id}:{user_id}``), whatever a button's value says, so nobody can page through,
forget or export another user's memories. A note's *Forget* button carries
:func:`core.memory.refs.memory_ref`, so an out-of-date one (or one posted before refs, with a
bare id) forgets nothing and answers :data:`core.memory.refs.STALE_BUTTON`. Outside the team
allow-lists (:mod:`core.chat.controls`) every command and button answers
:data:`core.chat.controls.NOT_ENABLED`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot.blocks import JsonDict, button, escape_mrkdwn, section
from bots.slack_bot.cleanup import ACTIONS as CLEANUP_ACTIONS
from bots.slack_bot.cleanup import SlackCleanup
from bots.slack_bot.places import ChannelKinds
from core.chat.controls import NOT_ENABLED, Controls, Place
from core.errors import (
    MemoryInputError,
    MemoryNotFound,
    PlanNotPending,
    storage_failed,
)
from core.memory import replies
from core.memory.cleanup_review import NO_MODEL
from core.memory.profile import listed_text
from core.memory.reflection import ReflectionResult
from core.memory.refs import memory_ref
from core.memory.replies import MEMORY_USAGE, MODE_REPLIES, MODE_WORDS
from core.memory.service import MemoryService, parse_memory_id
from core.memory.team import NOT_A_CHANNEL, TeamMemory
from core.memory.team_commands import channel_command
from core.types import Memory, Origin

logger = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], None]

COMMANDS = ("/remember", "/forget", "/memories", "/memory")
PAGE_SIZE = 10
SEARCH_K = 10

FORGET_ACTION = "selfmind_forget"
FORGET_ALL_ACTION = "selfmind_forget_all"
FORGET_ALL_CANCEL_ACTION = "selfmind_forget_all_cancel"
PAGE_ACTION = "selfmind_memories_page"

REMEMBER_BEFORE_ACK_S = 2.0
"""How long ``/remember`` may store before the acknowledgement (Slack allows 3 s)."""


def slack_place(*, key: str, team: str, channel: str | None) -> Place:
    """Where a Slack user is, for the allow-lists (:meth:`core.chat.controls.Controls.allows`,
    the one rule): a DM channel (``D...``) is private; ``channel`` None is the app's own
    surface for that user alone (the Home tab, the Messages tab), private too; any other
    channel (a channel, a group DM, none given) is shared."""
    private = channel is None or channel.startswith("D")
    return Place(platform="slack", user_key=key, workspace=team, channel=channel, private=private)


def channel_words(command: JsonDict) -> str | None:
    """The words after ``channel`` of ``/memories channel ...``, ``/remember channel TEXT``
    (as ``add TEXT``) or ``/memory channel on|off``; None for any other command text."""
    name = str(command.get("command", ""))
    first, _, rest = str(command.get("text") or "").strip().partition(" ")
    if first.lower() != "channel" or name not in ("/memories", "/remember", "/memory"):
        return None
    rest = rest.strip()
    return f"add {rest}" if name == "/remember" else rest


def user_key(install_id: str, user_id: str) -> str:
    """The memory key of a Slack user: ``slack:{install_id}:{user_id}``.

    The team-id rule, the same on every entry point (events, slash commands, buttons, the
    App Home and Messages tabs, feedback): ``install_id`` is the installation's id from
    ``auth.test`` at start-up (:attr:`bots.slack_bot.events.BotIdentity.install_id`): the
    workspace's ``team_id``, or the ``enterprise_id`` of an org-wide Enterprise Grid install.
    It never comes from the request: an event's envelope ``team_id``, a command's ``team_id``
    and a button's ``user.team_id`` differ for an external (Slack Connect) user, and keys
    built from them split one person's memory in two (``/memory off`` did not stop the
    learning, a Forget button could not reach a learned memory). Slack user ids are unique
    across workspaces (a Slack Connect user keeps their id), so ``user_id`` alone names the
    person within the installation.
    """
    return f"slack:{install_id}:{user_id}"


def memory_line(memory: Memory) -> str:
    """``#12 The user prefers …`` as mrkdwn."""
    return f"`#{memory.id}` {escape_mrkdwn(listed_text(memory))}"


def note_blocks(memories: Sequence[Memory]) -> tuple[str, list[JsonDict]]:
    """The "I'll remember" note: fallback text and blocks, a Forget button per memory."""
    lines = "\n".join(f"• {escape_mrkdwn(m.text)}" for m in memories)  # fallback: mentions inert
    blocks: list[JsonDict] = [section("I'll remember this:")]
    for m in memories:
        block = section(memory_line(m))
        block["accessory"] = button("Forget", FORGET_ACTION, memory_ref(m))
        blocks.append(block)
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": "Only you see this. `/memories` lists everything I keep; "
                    "`/memory pause` stops me learning.",
                }
            ],
        }
    )
    return f"I'll remember this:\n{lines}", blocks


def page_blocks(
    memories: Sequence[Memory], *, offset: int, total: int, user_key: str
) -> list[JsonDict]:
    """One page of ``/memories``, newest first, with Newer/Older buttons."""
    end = offset + len(memories)
    blocks = [
        section(replies.list_header(first=offset + 1, last=end, total=total)),
        # One section per memory: a section holds at most 3,000 characters.
        *(section(memory_line(m)) for m in memories),
    ]
    buttons = []
    if offset > 0:
        buttons.append(button("◀ Newer", PAGE_ACTION, str(max(0, offset - PAGE_SIZE))))
    if end < total:
        buttons.append(button("Older ▶", PAGE_ACTION, str(end)))
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    blocks.append(
        {
            "type": "context",
            "elements": [
                {
                    "type": "mrkdwn",
                    "text": "`/forget ID` deletes one; `/forget all`. "
                    + escape_mrkdwn(replies.your_key(user_key)),
                }
            ],
        }
    )
    return blocks


def export_jsonl(records: Sequence[JsonDict]) -> str:
    """JSON Lines: one memory a line (the ``selfmind memories import`` format)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


async def send_export(service: MemoryService, client: AsyncWebClient, key: str, user: str) -> int:
    """Send the memories of ``key`` to ``user``'s DM as a JSON Lines file; the count sent
    (0: nothing to send, no file). The ``/memories export`` command and the Home tab's
    *Export* both send through this."""
    records = await service.export(user_key=key)
    if not records:
        return 0
    opened = await client.conversations_open(users=user)
    channel = str(cast(JsonDict, opened["channel"])["id"])
    day = datetime.now(UTC).date().isoformat()
    await client.files_upload_v2(
        channel=channel,
        content=export_jsonl(records),
        filename=f"selfmind-memories-{day}.jsonl",
        title="Your SelfMind memories",
        initial_comment=replies.exported(len(records)),
    )
    logger.info("exported %d memories of %s to their DM", len(records), key)
    return len(records)


class SlackCommands:
    """The four slash commands, their buttons, and the reflection notes, over one store."""

    def __init__(
        self,
        *,
        service: MemoryService,
        client: AsyncWebClient,
        spawn: Spawn,
        controls: Controls | None = None,
        cleanup: SlackCleanup | None = None,
        install_id: str | None = None,
        after_change: Callable[[str], Coroutine[Any, Any, None]] | None = None,
        team: TeamMemory | None = None,
    ) -> None:
        self.install_id = install_id
        """The team part of every user key (:func:`user_key`); None: the request's team."""
        self.after_change = after_change
        """Awaited with the user key after each command or click (the App Home refresh)."""
        self.service = service
        self.client = client
        self.team = team
        """A channel's own memory (``/memories channel ...``); None: not offered."""
        self.kinds = ChannelKinds(client)
        """Where a command was used (:mod:`bots.slack_bot.places`)."""
        self.spawn = spawn
        self.controls = controls
        self.cleanup = cleanup

    def register(self, app: AsyncApp) -> None:
        """Add the command and button listeners to ``app``."""
        for command in COMMANDS:
            app.command(command)(self.on_command)
        for action in (FORGET_ACTION, FORGET_ALL_ACTION, FORGET_ALL_CANCEL_ACTION, PAGE_ACTION):
            app.action(action)(self.on_action)
        for action in CLEANUP_ACTIONS:
            app.action(action)(self.on_action)

    # --- listeners: acknowledge at once, work in a tracked background task

    async def on_command(self, ack: AsyncAck, command: JsonDict, respond: AsyncRespond) -> None:
        name = str(command.get("command", ""))
        if name == "/remember" and not channel_words(command):
            await self.on_remember(ack, command, respond)
            return
        await ack()
        self.spawn(self._guarded(self.run_command(command, respond), respond), f"slack{name}")

    async def on_remember(self, ack: AsyncAck, command: JsonDict, respond: AsyncRespond) -> None:
        """``/remember``: store first, acknowledge after (within
        :data:`REMEMBER_BEFORE_ACK_S` of Slack's 3 s), then reply through ``response_url``.
        A store that takes longer goes on after the acknowledgement; a store that fails is
        answered with :data:`core.errors.NOT_SAVED_COMMAND`, never with "Remembered"."""
        stored = asyncio.ensure_future(self.remember(command))
        with contextlib.suppress(Exception):  # its outcome is reported by the reply below
            await asyncio.wait_for(asyncio.shield(stored), REMEMBER_BEFORE_ACK_S)
        await ack()
        self.spawn(self._guarded(self._reply(stored, respond), respond), "slack/remember")

    async def _reply(self, reply: asyncio.Future[str], respond: AsyncRespond) -> None:
        await respond(text=await reply, response_type="ephemeral")

    async def on_action(self, ack: AsyncAck, body: JsonDict, respond: AsyncRespond) -> None:
        await ack()
        self.spawn(self._guarded(self.run_action(body, respond), respond), "slack-action")

    async def _guarded(self, work: Coroutine[Any, Any, None], respond: AsyncRespond) -> None:
        try:
            await work
        except (MemoryInputError, MemoryNotFound) as exc:
            await respond(text=replies.error_sentence(exc), response_type="ephemeral")
        except Exception as exc:
            if storage_failed(exc):
                logger.warning("slack command not saved: %s", type(exc).__name__)
            else:
                logger.exception("slack command failed")
            await respond(text=replies.error_sentence(exc), response_type="ephemeral")

    def allowed(self, key: str, team: str, channel: str) -> bool:
        """The team allow-lists (:mod:`core.chat.controls`); a DM channel id starts with D."""
        place = slack_place(key=key, team=team, channel=channel)
        return self.controls is None or self.controls.allows(place)

    # --- commands

    async def run_command(self, command: JsonDict, respond: AsyncRespond) -> None:
        """Run one slash command payload and answer it through ``respond`` (ephemeral)."""
        name = str(command.get("command", ""))
        text = str(command.get("text") or "").strip()
        team, user = str(command.get("team_id", "")), str(command.get("user_id", ""))
        key = user_key(self.install_id or team, user)
        logger.info("slash command %s user=%s", name, key)
        channel = str(command.get("channel_id") or "")
        if not self.allowed(key, team, channel):
            await respond(text=NOT_ENABLED, response_type="ephemeral")
            return
        words = channel_words(command)
        if words is not None:
            await self.channel_memory(command, key, words, respond)
            return
        match name:
            case "/remember":
                await respond(text=await self.remember(command), response_type="ephemeral")
            case "/forget":
                await self.forget(key, text, respond)
            case "/memories" if text.lower() == "cleanup":
                if self.cleanup is None:
                    await respond(text=NO_MODEL, response_type="ephemeral")
                else:
                    await self.cleanup.command(user_key=key, team=team, respond=respond)
            case "/memories":
                await self.memories(key, user, text, respond)
            case "/memory":
                await self.memory_mode(key, text, respond)
            case _:
                await respond(text=f"Unknown command {name}.", response_type="ephemeral")
        if self.after_change is not None:
            await self.after_change(key)

    async def channel_memory(
        self, command: JsonDict, key: str, words: str, respond: AsyncRespond
    ) -> None:
        """A channel-memory command (:mod:`core.memory.team_commands`): a change is posted
        in the channel for everyone (``in_channel``), a listing or a refusal only to the
        caller."""
        if self.team is None:
            await respond(text=NOT_A_CHANNEL, response_type="ephemeral")
            return
        place = await self.kinds.place(
            team=str(command.get("team_id", "")),
            enterprise=str(command.get("enterprise_id") or "") or None,
            channel=str(command.get("channel_id") or ""),
            user=str(command.get("user_id", "")),
        )
        answer = await channel_command(
            self.team,
            place=place,
            user_key=key,
            user_name=str(command.get("user_name") or "") or None,
            text=words,
        )
        # escaped: an entry's text is data (no mention, no link, no @here in the channel)
        await respond(
            text=escape_mrkdwn(answer.text),
            response_type="in_channel" if answer.public else "ephemeral",
        )

    async def remember(self, command: JsonDict) -> str:
        """Store the ``/remember`` text for the caller (through dedupe); the reply to show.
        Raises ``MemoryInputError`` for unusable text and the store's error when it fails."""
        team, user = str(command.get("team_id", "")), str(command.get("user_id", ""))
        key = user_key(self.install_id or team, user)
        channel = str(command.get("channel_id") or "")
        if not self.allowed(key, team, channel):
            return NOT_ENABLED
        text = str(command.get("text") or "").strip()
        place = await self.kinds.place(
            team=team,
            enterprise=str(command.get("enterprise_id") or "") or None,
            channel=channel,
            user=user,
        )
        origin: Origin = "private" if place.kind == "dm" else "shared"
        result = await self.service.remember(user_key=key, text=text, origin=origin, place=place)
        if self.after_change is not None:  # in the background: the ack waits for this
            self.spawn(self.after_change(key), "slack-after-remember")
        return replies.remembered(result, escape=escape_mrkdwn)

    async def forget(self, key: str, arg: str, respond: AsyncRespond) -> None:
        if arg.lower() == "all":
            count = await self.service.count(user_key=key)
            token = await self.service.confirm_forget_all(user_key=key)
            blocks = [
                section(replies.forget_all_question(count)),
                {
                    "type": "actions",
                    "elements": [
                        button(replies.FORGET_ALL_BUTTON, FORGET_ALL_ACTION, token, "danger"),
                        button(replies.CANCEL_BUTTON, FORGET_ALL_CANCEL_ACTION, "cancel"),
                    ],
                },
            ]
            await respond(
                text=replies.forget_all_question(count), blocks=blocks, response_type="ephemeral"
            )
            return
        if not arg.strip().removeprefix("#").isdigit():
            await respond(text=replies.FORGET_USAGE, response_type="ephemeral")
            return
        memory_id = parse_memory_id(arg)
        await self.service.forget(user_key=key, memory_id=memory_id)
        await respond(text=replies.forgot(memory_id), response_type="ephemeral")

    async def memories(self, key: str, user: str, arg: str, respond: AsyncRespond) -> None:
        verb, _, rest = arg.partition(" ")
        if not arg:
            await self.show_page(key, 0, respond, replace=False)
        elif verb.lower() == "export" and not rest.strip():
            await self.export(key, user, respond)
        else:
            query = rest.strip() if verb.lower() == "search" else arg
            if not query:
                await respond(text=replies.SEARCH_USAGE, response_type="ephemeral")
                return
            found = await self.service.search(user_key=key, query=query, k=SEARCH_K)
            if not found:
                await respond(text=replies.NO_MATCH, response_type="ephemeral")
                return
            lines = "\n".join(memory_line(s.memory) for s in found)
            await respond(
                text=f"{replies.SEARCH_HEADER}\n{lines}",
                blocks=[
                    section(replies.SEARCH_HEADER),
                    *(section(memory_line(s.memory)) for s in found),
                ],
                response_type="ephemeral",
            )

    async def show_page(
        self, key: str, offset: int, respond: AsyncRespond, *, replace: bool
    ) -> None:
        total = await self.service.count(user_key=key)
        rows = await self.service.list_memories(user_key=key, limit=PAGE_SIZE, offset=offset)
        if not rows:
            text = (
                f"{replies.NO_MEMORIES_YET} {replies.your_key(key)}"
                if total == 0
                else replies.NO_MORE_ON_PAGE
            )
            await respond(text=text, response_type="ephemeral", replace_original=replace or None)
            return
        await respond(
            text=replies.list_header(first=offset + 1, last=offset + len(rows), total=total),
            blocks=page_blocks(rows, offset=offset, total=total, user_key=key),
            response_type="ephemeral",
            replace_original=replace or None,
        )

    async def export(self, key: str, user: str, respond: AsyncRespond) -> None:
        count = await self.send_export(key, user)
        if not count:
            await respond(text=replies.NO_EXPORT, response_type="ephemeral")
            return
        await respond(text=replies.export_sent(count), response_type="ephemeral")

    async def send_export(self, key: str, user: str) -> int:
        """:func:`send_export` with this adapter's service and client."""
        return await send_export(self.service, self.client, key, user)

    async def memory_mode(self, key: str, arg: str, respond: AsyncRespond) -> None:
        word = arg.lower()
        if not word:
            current = await self.service.get_mode(user_key=key)
            note = await self.service.last_tidy(user_key=key)
            tidy = (
                f"\n{replies.tidied(note.tidied, dated=note.dated)}"
                if note is not None and note.tidied
                else ""
            )
            await respond(
                text=f"{MODE_REPLIES[current]} {MEMORY_USAGE}{tidy}", response_type="ephemeral"
            )
            return
        if word == "undo":  # last night's consolidation (core.memory.consolidation)
            restored = await self.service.undo_tidy(user_key=key)
            await respond(text=replies.tidy_undone(restored), response_type="ephemeral")
            return
        mode = MODE_WORDS.get(word)
        if mode is None:
            await respond(text=MEMORY_USAGE, response_type="ephemeral")
            return
        await self.service.set_mode(user_key=key, mode=mode)
        await respond(text=MODE_REPLIES[mode], response_type="ephemeral")

    # --- buttons

    async def run_action(self, body: JsonDict, respond: AsyncRespond) -> None:
        """Handle one ``block_actions`` click, always for the user who clicked."""
        who = cast(JsonDict, body.get("user") or {})
        team = str(who.get("team_id") or cast(JsonDict, body.get("team") or {}).get("id", ""))
        key = user_key(self.install_id or team, str(who.get("id", "")))
        actions = cast(list[JsonDict], body.get("actions") or [])
        if not actions:
            return
        action_id, value = str(actions[0].get("action_id")), str(actions[0].get("value", ""))
        logger.info("slack action %s user=%s", action_id, key)
        channel = str(cast(JsonDict, body.get("channel") or {}).get("id") or "")
        if not self.allowed(key, team, channel):
            await respond(text=NOT_ENABLED, response_type="ephemeral")
            return
        if action_id == FORGET_ACTION:
            # A stale or old-format value raises StaleButton: its one sentence is the answer.
            forgotten = await self.service.forget_ref(user_key=key, ref=value)
            await respond(text=replies.forgot(forgotten.id), response_type="ephemeral")
        elif action_id == FORGET_ALL_ACTION:
            try:
                count = await self.service.forget_all_confirmed(user_key=key, token=value)
            except PlanNotPending as exc:
                await respond(text=str(exc), response_type="ephemeral")
                return
            await respond(text=replies.forgot_all(count), replace_original=True)
        elif action_id == FORGET_ALL_CANCEL_ACTION:
            await respond(text=replies.KEPT_ALL, replace_original=True)
        elif action_id == PAGE_ACTION:
            offset = int(value) if value.isascii() and value.isdigit() and len(value) < 10 else 0
            await self.show_page(key, offset, respond, replace=True)
        elif action_id in CLEANUP_ACTIONS and self.cleanup is not None:
            await self.cleanup.action(
                action_id=action_id, value=value, user_key=key, respond=respond
            )
        if self.after_change is not None:
            await self.after_change(key)

    # --- reflection notes

    async def memory_note(self, result: ReflectionResult) -> None:
        """Reflection callback: tell the user, ephemerally, what was remembered.

        Posted with ``chat.postEphemeral`` in the conversation's channel (and thread).
        """
        turn = result.turn
        parts = (turn.user_key or "").split(":")
        conversation = turn.conversation_key.split(":")
        if len(parts) != 3 or parts[0] != "slack" or conversation[0] != "slack":
            return
        channel = conversation[2]
        thread_ts = conversation[3] if len(conversation) > 3 else turn.thread_ref
        text, blocks = note_blocks(result.added)
        await self.client.chat_postEphemeral(
            channel=channel, user=parts[2], text=text, blocks=blocks, thread_ts=thread_ts
        )
        logger.info("memory note to user=%s memories=%d", turn.user_key, len(result.added))
