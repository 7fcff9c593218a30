"""``/memories cleanup`` on Slack: the caller's cleanup plan, ephemeral, with Apply and Cancel.

The slash command is acknowledged at once (:class:`bots.slack_bot.commands.SlackCommands`);
planning takes Claude calls, so the answers go through ``response_url``: one line saying it
is planning, then the plan (or one line: nothing to clean up, an unusable plan, no model, a
daily cap). The plan shows one section per operation (the first
:data:`MAX_PLAN_SECTIONS`, then "… and N more": Apply still applies all of them); an
operation that touches /remember memories is marked with
:data:`core.memory.cleanup_review.USER_ADDED_MARK`.

The buttons carry the plan id; the core (:class:`core.memory.cleanup_review.CleanupReviews`)
checks that the clicking user's memory key owns the plan and takes it from the store once, so
Apply works on any replica and a replayed click does nothing. Apply replaces the plan with
the before/after counts, the change id and an Undo button carrying a single-use token; Undo
acts on the clicker's own change only (the store refuses anyone else's), once.
"""

from __future__ import annotations

import logging

from slack_bolt.context.respond.async_respond import AsyncRespond

from bots.slack_bot.blocks import (
    MAX_SECTION_CHARS,
    JsonDict,
    button,
    clip_mrkdwn,
    context,
    escape_mrkdwn,
    section,
)
from core.errors import PlanNotPending, StoreError
from core.memory.cleanup_review import (
    CANCELLED,
    PLANNING,
    CleanupReviews,
    Proposal,
    applied_text,
    more_line,
    operation_lines,
    plan_footer,
    plan_header,
    undone_text,
)

logger = logging.getLogger(__name__)

APPLY_ACTION = "selfmind_cleanup_apply"
CANCEL_ACTION = "selfmind_cleanup_cancel"
UNDO_ACTION = "selfmind_cleanup_undo"
ACTIONS = (APPLY_ACTION, CANCEL_ACTION, UNDO_ACTION)

MAX_PLAN_SECTIONS = 40
"""Operations shown one a section; with the header, "more", footer and buttons a plan stays
under Slack's 50 blocks a message."""


def plan_blocks(proposal: Proposal, *, expires_in_s: float) -> tuple[str, list[JsonDict]]:
    """Fallback text and blocks of a pending plan, with Apply and Cancel buttons."""
    assert proposal.plan_id is not None
    run = proposal.run
    header = escape_mrkdwn(plan_header(run))
    lines = operation_lines(run, escape=escape_mrkdwn, max_chars=MAX_SECTION_CHARS)
    shown = lines[:MAX_PLAN_SECTIONS]
    blocks = [section(f"*{header}*")]
    blocks += [section(clip_mrkdwn(line)) for line in shown]
    if len(lines) > len(shown):
        blocks.append(context(more_line(len(lines) - len(shown), len(lines))))
    blocks.append(context(f"Only you see this. {plan_footer(expires_in_s)}"))
    blocks.append(
        {
            "type": "actions",
            "elements": [
                button("Apply", APPLY_ACTION, proposal.plan_id, "primary"),
                button("Cancel", CANCEL_ACTION, proposal.plan_id),
            ],
        }
    )
    return header, blocks


class SlackCleanup:
    """The command and its three buttons over one :class:`CleanupReviews`."""

    def __init__(self, reviews: CleanupReviews) -> None:
        self.reviews = reviews

    async def command(self, *, user_key: str, team: str, respond: AsyncRespond) -> None:
        """``/memories cleanup``: plan, then show the plan to the caller only."""
        line = await self.reviews.precheck(user_key=user_key, workspace=team)
        if line is not None:
            await respond(text=line, response_type="ephemeral")
            return
        await respond(text=PLANNING, response_type="ephemeral")
        proposal = await self.reviews.propose(user_key=user_key)
        if proposal.message is not None:
            await respond(text=proposal.message, response_type="ephemeral")
            return
        text, blocks = plan_blocks(proposal, expires_in_s=self.reviews.ttl_s)
        await respond(text=text, blocks=blocks, response_type="ephemeral")

    async def action(
        self, *, action_id: str, value: str, user_key: str, respond: AsyncRespond
    ) -> None:
        """One click on Apply, Cancel or Undo, for the user who clicked."""
        try:
            if action_id == APPLY_ACTION:
                run = await self.reviews.apply(plan_id=value, user_key=user_key)
                assert run.applied is not None
                text = applied_text(run)
                token = await self.reviews.undo_token(
                    user_key=user_key, change_id=run.applied.change_id
                )
                undo = button("Undo", UNDO_ACTION, token)
                blocks = [section(text), {"type": "actions", "elements": [undo]}]
                await respond(text=text, blocks=blocks, replace_original=True)
            elif action_id == CANCEL_ACTION:
                await self.reviews.cancel(plan_id=value, user_key=user_key)
                await respond(text=CANCELLED, replace_original=True)
            elif action_id == UNDO_ACTION:
                restored = await self.reviews.undo(user_key=user_key, token=value)
                await respond(text=undone_text(restored), replace_original=True)
        except PlanNotPending as exc:
            if exc.reason == "changed":  # this click took the plan: its buttons go too
                await respond(text=str(exc), replace_original=True)
            else:  # someone else's, or gone (maybe applied by a click just before this one)
                await respond(text=str(exc), response_type="ephemeral")
        except StoreError as exc:  # Undo: not this user's change, or already undone
            logger.info("cleanup undo refused: user=%s error=%s", user_key, exc)
            await respond(text=f"Could not undo: {exc}.", response_type="ephemeral")
