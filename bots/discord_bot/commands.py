"""Discord slash commands (``app_commands``) over :class:`core.memory.service.MemoryService`.

Every answer is ephemeral (only the caller sees it) and every command acts on the caller's
own memory key ``discord:{user_id}``, never on anyone else's:

- ``/remember text:`` stores a memory (origin ``private`` in a DM, ``shared`` in a server);
- ``/forget memory:`` forgets one memory; autocomplete offers the caller's own memories
  (best BM25 matches of what was typed, or the newest; each choice's value is
  :func:`core.memory.refs.memory_ref`, so a choice made stale meanwhile forgets nothing and
  says so, while an id typed by hand is taken as it is) and "All my memories", which asks
  for confirmation with a button only the caller can press;
- ``/memories list`` (paginated with buttons), ``/memories search query:``,
  ``/memories export`` (a JSON Lines attachment), ``/memories cleanup`` (a plan to apply or
  cancel; :mod:`bots.discord_bot.cleanup`);
- ``/memory pause | resume | off | on`` sets the memory mode: ``paused`` recalls but learns
  nothing, ``off`` neither recalls nor learns.

Outside the team allow-lists (:mod:`core.chat.controls`) every command answers one line saying
SelfMind is not enabled there, and autocomplete offers nothing (:class:`GuardedTree`).

Interactions must be answered within 3 s (https://discord.com/developers/docs/interactions/
receiving-and-responding#responding-to-an-interaction), and the token then lasts 15 minutes
for followups: the commands whose work grows with the number of memories (``export``,
forgetting all) defer first and follow up; ``/remember`` and ``/memories search`` (a store
write, an embedding) answer at once when they are quick and defer when they are still working
:data:`DEFER_AFTER_S` after the command arrived (:func:`in_time`). An interaction that expired
anyway (Discord's "Unknown interaction" / "Unknown Webhook") ends with one logged line
(:func:`expired`), no traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

import discord
from discord import app_commands

from bots.discord_bot.places import interaction_place
from bots.discord_bot.sink import NO_MENTIONS
from core.chat.controls import NOT_ENABLED, Controls, Place
from core.errors import (
    NOT_SAVED_COMMAND,
    MemoryInputError,
    MemoryNotFound,
    PlanNotPending,
    SelfMindError,
    StaleButton,
    storage_failed,
)
from core.memory import replies
from core.memory.profile import listed_text
from core.memory.refs import memory_ref, parse_memory_ref
from core.memory.replies import MODE_REPLIES, MODE_WORDS
from core.memory.service import MemoryService, parse_memory_id
from core.types import MAX_MEMORY_CHARS, Memory, Origin

logger = logging.getLogger(__name__)

T = TypeVar("T")
Interaction = discord.Interaction[discord.Client]
Tree = app_commands.CommandTree[discord.Client]

MAX_CONTENT_CHARS = 2000
"""Discord message content limit, characters."""
PAGE_SIZE = 8
"""Memories per ``/memories list`` page: 8 of up to 199 characters fit in 2,000."""
MAX_CHOICES = 25
"""Autocomplete choices Discord accepts; one is "All my memories"."""
CHOICE_NAME_CHARS = 100
"""Length limit of a choice's name."""
FORGET_ALL = "all"
EXPORT_FILENAME = "selfmind-memories.jsonl"
VIEW_TIMEOUT_S = 600.0
"""Buttons stop working after 10 minutes (an interaction token lasts 15)."""
DEFER_AFTER_S = 1.5
"""A quick command still working this long after it arrived defers: Discord waits 3 s for
the first response ("Unknown interaction" after that), and the defer itself is a call."""
EXPIRED_CODES = frozenset({10062, 10015})
"""Discord's "Unknown interaction" (the first response came after 3 s) and "Unknown Webhook"
(a followup or edit after the token's 15 minutes) JSON error codes
(https://discord.com/developers/docs/topics/opcodes-and-status-codes#json)."""


def expired(error: BaseException) -> bool:
    """Whether ``error`` says the interaction can no longer be answered (:data:`EXPIRED_CODES`)."""
    return isinstance(error, discord.NotFound) and error.code in EXPIRED_CODES


async def in_time(interaction: Interaction, work: Awaitable[T]) -> T:
    """``work``'s result; if it is not done :data:`DEFER_AFTER_S` after the command arrived,
    the interaction is deferred (ephemeral, "thinking") first, so the answer can follow up
    instead of missing Discord's 3 s (a slow store or embedding)."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=DEFER_AFTER_S)
    if not done and not interaction.response.is_done():
        logger.info("command %s deferred: still working", _command_name(interaction))
        try:
            await interaction.response.defer(ephemeral=True, thinking=True)
        except discord.HTTPException:
            # Too late (expired) or refused: the work still finishes (a memory is stored
            # even when the user can no longer be told), then the error ends the command.
            await asyncio.gather(task, return_exceptions=True)
            raise
        except BaseException:
            task.cancel()
            raise
    return await task


def _command_name(interaction: Interaction) -> str:
    return str(getattr(interaction.command, "qualified_name", "?"))


def user_key_of(user: discord.abc.User) -> str:
    """The memory key of a Discord user: ``discord:{user_id}``."""
    return f"discord:{user.id}"


def fit_lines(header: str, lines: list[str], limit: int = MAX_CONTENT_CHARS) -> str:
    """``header`` and as many ``lines`` as fit in ``limit`` characters (then "…")."""
    out = header
    for index, line in enumerate(lines):
        more = "\n…" if index < len(lines) - 1 else ""
        if len(out) + 1 + len(line) + len(more) > limit:
            return out + "\n…"
        out += "\n" + line
    return out


def memory_line(memory: Memory) -> str:
    return f"`#{memory.id}` {discord.utils.escape_markdown(listed_text(memory))}"


def choice_name(memory: Memory) -> str:
    name = f"#{memory.id} {memory.text}"
    return name if len(name) <= CHOICE_NAME_CHARS else name[: CHOICE_NAME_CHARS - 1] + "…"


async def forget_choices(
    service: MemoryService, *, user_key: str, current: str
) -> list[app_commands.Choice[str]]:
    """Autocomplete for ``/forget memory:``: the caller's memories matching ``current``
    (an id prefix, or BM25 over the text; the newest when empty), then "All my memories"."""
    query = current.strip().lstrip("#")
    limit = MAX_CHOICES - 1
    if not query:
        found = await service.list_memories(user_key=user_key, limit=limit)
    elif query.isascii() and query.isdigit():
        recent = await service.list_memories(user_key=user_key, limit=1000)
        found = [m for m in recent if str(m.id).startswith(query)][:limit]
    else:
        found = [s.memory for s in await service.search(user_key=user_key, query=query, k=limit)]
    choices = [app_commands.Choice(name=choice_name(m), value=memory_ref(m)) for m in found]
    choices.append(app_commands.Choice(name="All my memories", value=FORGET_ALL))
    return choices


async def reply(interaction: Interaction, content: str, **kwargs: Any) -> None:
    """An ephemeral answer, as a response or (once deferred or answered) a followup; it
    pings nobody (``allowed_mentions``, as the sink's: a memory's text may hold
    ``@everyone`` or a mention)."""
    kwargs.setdefault("allowed_mentions", NO_MENTIONS)
    if interaction.response.is_done():
        await interaction.followup.send(content, ephemeral=True, **kwargs)
    else:
        await interaction.response.send_message(content, ephemeral=True, **kwargs)


def place_of_interaction(interaction: Interaction) -> Place:
    """Where a command comes from, for the allow-lists (a thread counts as its channel)."""
    channel = interaction.channel
    channel_id = (
        channel.parent_id if isinstance(channel, discord.Thread) else interaction.channel_id
    )
    return Place(
        platform="discord",
        user_key=user_key_of(interaction.user),
        workspace=str(interaction.guild_id) if interaction.guild_id is not None else None,
        channel=str(channel_id) if channel_id is not None else None,
        private=interaction.guild_id is None,
    )


class GuardedTree(app_commands.CommandTree[discord.Client]):
    """A command tree that lets only places and users admitted by the allow-lists in."""

    def __init__(self, client: discord.Client, *, controls: Controls) -> None:
        super().__init__(client)
        self.controls = controls

    async def interaction_check(self, interaction: Interaction, /) -> bool:
        if self.controls.allows(place_of_interaction(interaction)):
            return True
        logger.info("command refused by the allow-lists: user=%s", user_key_of(interaction.user))
        if interaction.type is discord.InteractionType.autocomplete:
            await interaction.response.autocomplete([])
        else:
            await interaction.response.send_message(NOT_ENABLED, ephemeral=True)
        return False


class OwnedView(discord.ui.View):
    """A view whose buttons only ``owner_id`` may press."""

    def __init__(self, *, owner_id: int, timeout: float | None = VIEW_TIMEOUT_S) -> None:
        super().__init__(timeout=timeout)
        self.owner_id = owner_id

    async def interaction_check(self, interaction: Interaction) -> bool:
        if interaction.user.id == self.owner_id:
            return True
        await interaction.response.send_message(
            "These buttons belong to someone else's command.", ephemeral=True
        )
        return False

    async def on_error(
        self, interaction: Interaction, error: Exception, item: discord.ui.Item[Any]
    ) -> None:
        if expired(error):
            logger.warning(
                "button %s not answered: the interaction expired (Discord code %s)",
                type(item).__name__,
                getattr(error, "code", "?"),
            )
            return
        if storage_failed(error):
            logger.warning("button %s not saved: %s", type(item).__name__, type(error).__name__)
            await reply(interaction, NOT_SAVED_COMMAND)
            return
        logger.error("button %s failed", type(item).__name__, exc_info=error)
        await reply(interaction, "Something went wrong; nothing was changed.")


class ForgetAllView(OwnedView):
    """ "Forget everything?" with Forget and Cancel buttons."""

    def __init__(self, service: MemoryService, *, owner_id: int, user_key: str, token: str) -> None:
        super().__init__(owner_id=owner_id, timeout=120.0)
        self.service = service
        self.user_key = user_key
        self.token = token

    @discord.ui.button(label=replies.FORGET_ALL_BUTTON, style=discord.ButtonStyle.danger)
    async def confirm(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        await interaction.response.defer()
        self.stop()
        try:
            count = await self.service.forget_all_confirmed(
                user_key=self.user_key, token=self.token
            )
        except PlanNotPending as exc:
            await interaction.edit_original_response(content=str(exc), view=None)
            return
        await interaction.edit_original_response(content=replies.forgot_all(count), view=None)

    @discord.ui.button(label=replies.CANCEL_BUTTON, style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        self.stop()
        await interaction.response.edit_message(content=replies.KEPT_ALL, view=None)


class MemoryPager(OwnedView):
    """``/memories list``: one page of the caller's memories, newest first, with buttons."""

    def __init__(self, service: MemoryService, *, owner_id: int, user_key: str) -> None:
        super().__init__(owner_id=owner_id)
        self.service = service
        self.user_key = user_key
        self.page = 0
        self.pages = 1

    async def render(self) -> str:
        """The current page's text; also enables or disables the buttons."""
        total = await self.service.count(user_key=self.user_key)
        self.pages = max(1, -(-total // PAGE_SIZE))
        self.page = min(self.page, self.pages - 1)
        rows = await self.service.list_memories(
            user_key=self.user_key, limit=PAGE_SIZE, offset=self.page * PAGE_SIZE
        )
        self.newer.disabled = self.page == 0
        self.older.disabled = self.page >= self.pages - 1
        if not rows:
            return f"{replies.NO_MEMORIES_YET} {replies.your_key(self.user_key)}"
        first = self.page * PAGE_SIZE + 1
        header = replies.list_header(first=first, last=first + len(rows) - 1, total=total)
        header += "\n" + replies.your_key(self.user_key)
        return fit_lines(header, [memory_line(m) for m in rows])

    @discord.ui.button(label="◀ Newer", style=discord.ButtonStyle.secondary)
    async def newer(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        self.page = max(0, self.page - 1)
        await interaction.response.edit_message(content=await self.render(), view=self)

    @discord.ui.button(label="Older ▶", style=discord.ButtonStyle.secondary)
    async def older(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        self.page += 1
        await interaction.response.edit_message(content=await self.render(), view=self)


def add_memory_commands(tree: Tree, *, service: MemoryService) -> None:
    """Register ``/remember``, ``/forget``, ``/memories ...`` and ``/memory ...`` on ``tree``."""

    @tree.command(name="remember", description="Remember something about you.")
    @app_commands.describe(text="One sentence, e.g. 'I prefer answers in bullet points.'")
    async def remember(
        interaction: Interaction, text: app_commands.Range[str, 1, MAX_MEMORY_CHARS - 1]
    ) -> None:
        origin: Origin = "private" if interaction.guild_id is None else "shared"
        place = interaction_place(interaction)
        try:
            result = await in_time(
                interaction,
                service.remember(
                    user_key=user_key_of(interaction.user), text=text, origin=origin, place=place
                ),
            )
        except MemoryInputError as exc:
            await reply(interaction, replies.error_sentence(exc))
            return
        await reply(interaction, replies.remembered(result, escape=discord.utils.escape_markdown))

    @tree.command(name="forget", description="Forget one of your memories, or all of them.")
    @app_commands.describe(memory="Start typing to find a memory, or pick 'All my memories'.")
    async def forget(interaction: Interaction, memory: str) -> None:
        user_key = user_key_of(interaction.user)
        if memory.strip().lower() in (FORGET_ALL, "all my memories"):
            count = await service.count(user_key=user_key)
            token = await service.confirm_forget_all(user_key=user_key)
            view = ForgetAllView(
                service, owner_id=interaction.user.id, user_key=user_key, token=token
            )
            await reply(interaction, replies.forget_all_question(count), view=view)
            return
        try:
            if parse_memory_ref(memory) is not None:  # a choice: proves which memory it meant
                forgotten = await service.forget_ref(user_key=user_key, ref=memory)
            else:  # an id typed by hand
                forgotten = await service.forget(
                    user_key=user_key, memory_id=parse_memory_id(memory)
                )
        except StaleButton as exc:
            await reply(interaction, str(exc))
            return
        except MemoryNotFound:
            await reply(interaction, "No such memory of yours; pick one from the list.")
            return
        await reply(interaction, replies.forgot(forgotten.id))

    @forget.autocomplete("memory")
    async def forget_autocomplete(
        interaction: Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        return await forget_choices(
            service, user_key=user_key_of(interaction.user), current=current
        )

    memories = app_commands.Group(
        name="memories", description="See, export or clean up your memories."
    )

    @memories.command(name="list", description="Your memories, newest first.")
    async def memories_list(interaction: Interaction) -> None:
        pager = MemoryPager(
            service, owner_id=interaction.user.id, user_key=user_key_of(interaction.user)
        )
        content = await pager.render()
        if pager.pages > 1:
            await reply(interaction, content, view=pager)
        else:
            await reply(interaction, content)

    @memories.command(name="search", description="Your memories most related to a query.")
    @app_commands.describe(query="Any text.")
    async def memories_search(
        interaction: Interaction, query: app_commands.Range[str, 1, 500]
    ) -> None:
        found = await in_time(
            interaction, service.search(user_key=user_key_of(interaction.user), query=query, k=10)
        )
        if not found:
            await reply(interaction, replies.NO_MATCH)
            return
        lines = [memory_line(s.memory) for s in found]
        await reply(interaction, fit_lines(replies.SEARCH_HEADER, lines))

    @memories.command(name="export", description="Download your memories as JSON Lines.")
    async def memories_export(interaction: Interaction) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        records = await service.export(user_key=user_key_of(interaction.user))
        if not records:
            await reply(interaction, replies.NO_EXPORT)
            return
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
        if len(data) > interaction.filesize_limit:
            await reply(interaction, "Too many memories to attach here; ask the bot's operator.")
            return
        file = discord.File(io.BytesIO(data), filename=EXPORT_FILENAME)
        await reply(interaction, replies.exported(len(records)), file=file)

    memory = app_commands.Group(name="memory", description="Pause or turn off your memory.")

    async def set_mode(interaction: Interaction, command: str) -> None:
        mode = MODE_WORDS[command]
        await service.set_mode(user_key=user_key_of(interaction.user), mode=mode)
        await reply(interaction, MODE_REPLIES[mode])

    @memory.command(name="pause", description="Keep using what I know, but learn nothing new.")
    async def memory_pause(interaction: Interaction) -> None:
        await set_mode(interaction, "pause")

    @memory.command(name="resume", description="Learn from our conversations again.")
    async def memory_resume(interaction: Interaction) -> None:
        await set_mode(interaction, "resume")

    @memory.command(name="off", description="Neither use nor learn anything about you.")
    async def memory_off(interaction: Interaction) -> None:
        await set_mode(interaction, "off")

    @memory.command(name="on", description="Use and learn memories again.")
    async def memory_on(interaction: Interaction) -> None:
        await set_mode(interaction, "on")

    @memory.command(name="undo", description="Put back what I tidied last night.")
    async def memory_undo(interaction: Interaction) -> None:
        restored = await service.undo_tidy(user_key=user_key_of(interaction.user))
        await reply(interaction, replies.tidy_undone(restored))

    tree.add_command(memories)
    tree.add_command(memory)


async def on_tree_error(interaction: Interaction, error: app_commands.AppCommandError) -> None:
    """The slash-command edge: a short, true ephemeral line; unexpected errors are logged."""
    cause = error.original if isinstance(error, app_commands.CommandInvokeError) else error
    if expired(cause):  # nothing can reach the user any more: one line, no traceback
        logger.warning(
            "command %s not answered: the interaction expired (Discord code %s)",
            _command_name(interaction),
            getattr(cause, "code", "?"),
        )
        return
    if storage_failed(cause):
        logger.warning("command not saved: %s", type(cause).__name__)
    elif isinstance(cause, SelfMindError):
        logger.warning("command failed: %s", type(cause).__name__)
    else:
        logger.error("command %s failed", _command_name(interaction), exc_info=cause)
    message = replies.error_sentence(cause)
    try:
        await reply(interaction, message)
    except discord.HTTPException:
        logger.info("could not report the command error to the user")
