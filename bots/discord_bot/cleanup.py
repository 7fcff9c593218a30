"""``/memories cleanup`` on Discord: the caller's cleanup plan, ephemeral, with Apply and Cancel.

Planning takes Claude calls, longer than the 3 s an interaction may wait, so the command
defers (ephemeral, "thinking") and answers with a followup: the plan, or one line (nothing to
clean up, an unusable plan, no model, a daily cap). The plan fits Discord's 2,000 characters:
the operations that fit, then "… and N more" (Apply still applies all of them). An
operation that touches /remember memories is marked with
:data:`core.memory.cleanup_review.USER_ADDED_MARK`.

Only the caller can press the buttons (:class:`bots.discord_bot.commands.OwnedView`, and the
core checks the memory key again). Apply replaces the plan with the before/after counts, the
change id and an Undo button; Cancel discards the plan. The buttons stop
:data:`VIEW_TIMEOUT_S` after the command arrived (the planning's minutes included), and the
plan is dropped then and marked expired with the command's token while it still works.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
from discord import app_commands

from bots.discord_bot.commands import (
    MAX_CONTENT_CHARS,
    Interaction,
    OwnedView,
    Tree,
    place_of_interaction,
    reply,
    user_key_of,
)
from core.errors import PlanNotPending, StoreError
from core.memory.cleanup_review import (
    CANCELLED,
    CleanupReviews,
    Proposal,
    applied_text,
    fit_lines,
    more_line,
    operation_lines,
    plan_footer,
    plan_header,
    undone_text,
)

logger = logging.getLogger(__name__)

VIEW_TIMEOUT_S = 14 * 60.0
"""Buttons work this long after the command arrived, planning included. The token that edits
the plan message lasts 15 minutes from then
(https://discord.com/developers/docs/interactions/receiving-and-responding), so the plan can
still be marked expired when they stop."""
LINE_CHARS = 400
"""An operation's line is cut here, so a few always fit in one message."""
EXPIRED = "This cleanup plan expired; nothing was changed. Run `/memories cleanup` again."


def plan_content(
    proposal: Proposal, limit: int = MAX_CONTENT_CHARS, *, expires_in_s: float = VIEW_TIMEOUT_S
) -> str:
    """The plan as one message of at most ``limit`` characters."""
    run = proposal.run
    header = f"**{discord.utils.escape_markdown(plan_header(run))}**"
    lines = operation_lines(run, escape=discord.utils.escape_markdown, max_chars=LINE_CHARS)
    footer = plan_footer(expires_in_s)
    more = more_line(len(lines), len(lines))  # the longest "more" line it can need
    budget = limit - len(header) - len(footer) - len(more) - 3
    shown, left_out = fit_lines(lines, budget=budget)
    parts = [header, *shown]
    if left_out:
        parts.append(more_line(left_out, len(lines)))
    parts.append(footer)
    return "\n".join(parts)


class CleanupView(OwnedView):
    """Apply or Cancel one pending plan."""

    def __init__(
        self,
        reviews: CleanupReviews,
        *,
        owner_id: int,
        plan_id: str,
        command: Interaction,
        timeout: float = VIEW_TIMEOUT_S,
    ) -> None:
        super().__init__(owner_id=owner_id, timeout=timeout)
        self.reviews = reviews
        self.plan_id = plan_id
        self.command = command

    @discord.ui.button(label="Apply", style=discord.ButtonStyle.success)
    async def apply(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        await interaction.response.defer()
        self.stop()
        try:
            run = await self.reviews.apply(
                plan_id=self.plan_id, user_key=user_key_of(interaction.user)
            )
        except PlanNotPending as exc:
            await interaction.edit_original_response(content=str(exc), view=None)
            return
        assert run.applied is not None
        token = await self.reviews.undo_token(
            user_key=user_key_of(interaction.user), change_id=run.applied.change_id
        )
        undo = UndoView(self.reviews, owner_id=self.owner_id, token=token)
        await interaction.edit_original_response(content=applied_text(run), view=undo)

    @discord.ui.button(label="Cancel", style=discord.ButtonStyle.secondary)
    async def cancel(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        self.stop()
        await interaction.response.edit_message(content=CANCELLED, view=None)
        await self.reviews.cancel(plan_id=self.plan_id, user_key=user_key_of(interaction.user))

    async def on_timeout(self) -> None:
        await self.reviews.discard(self.plan_id)
        try:
            await self.command.edit_original_response(content=EXPIRED, view=None)
        except discord.HTTPException as exc:
            logger.info("could not mark cleanup plan %s expired: HTTP %s", self.plan_id, exc.status)


class UndoView(OwnedView):
    """Undo an applied cleanup change (the store refuses anyone else's change anyway)."""

    def __init__(self, reviews: CleanupReviews, *, owner_id: int, token: str) -> None:
        super().__init__(owner_id=owner_id, timeout=VIEW_TIMEOUT_S)
        self.reviews = reviews
        self.token = token

    @discord.ui.button(label="Undo", style=discord.ButtonStyle.secondary)
    async def undo(self, interaction: Interaction, button: discord.ui.Button[Any]) -> None:
        await interaction.response.defer()
        self.stop()
        try:
            restored = await self.reviews.undo(
                user_key=user_key_of(interaction.user), token=self.token
            )
        except PlanNotPending as exc:
            await interaction.edit_original_response(content=str(exc), view=None)
            return
        except StoreError as exc:
            await interaction.edit_original_response(content=f"Could not undo: {exc}.", view=None)
            return
        await interaction.edit_original_response(content=undone_text(restored), view=None)


def add_cleanup_command(tree: Tree, *, reviews: CleanupReviews) -> None:
    """Add ``cleanup`` to the ``/memories`` group (:func:`add_memory_commands` first)."""
    memories = tree.get_command("memories")
    assert isinstance(memories, app_commands.Group)

    @memories.command(name="cleanup", description="Tidy your memories: see a plan, then apply it.")
    async def memories_cleanup(interaction: Interaction) -> None:
        clock = asyncio.get_running_loop().time
        arrived = clock()
        await interaction.response.defer(ephemeral=True, thinking=True)
        key = user_key_of(interaction.user)
        line = await reviews.precheck(
            user_key=key, workspace=place_of_interaction(interaction).workspace
        )
        if line is not None:
            await reply(interaction, line)
            return
        proposal = await reviews.propose(user_key=key)
        if proposal.plan_id is None:
            await reply(interaction, proposal.message or "")
            return
        left_s = max(1.0, VIEW_TIMEOUT_S - (clock() - arrived))  # the token's clock runs
        view = CleanupView(
            reviews,
            owner_id=interaction.user.id,
            plan_id=proposal.plan_id,
            command=interaction,
            timeout=left_s,
        )
        await reply(interaction, plan_content(proposal, expires_in_s=left_s), view=view)
