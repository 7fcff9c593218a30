"""Thumbs up / down under finished answers (:func:`bots.slack_bot.blocks.feedback_blocks`).

A click is stored first and acknowledged after (``process_before_response``: Bolt answers
Slack once the listener returns; a store that fails raises, Slack gets HTTP 500 / no Socket
Mode ack and shows the click as failed). One rating per user and answer
(:class:`core.store.seams.FeedbackStore`; a second click replaces the first). Only the
person who asked may rate: anyone else's click is acknowledged, not stored, and told so
ephemerally. Answer ref: ``slack:{team}:{channel}:{answered ts}`` (``team`` the workspace the
click came from); the rater's key follows the one team-id rule of
:func:`bots.slack_bot.commands.user_key` (the installation's id, never the request's team), so
an external (Slack Connect) user's rating is keyed as their memory is.

Before anything is stored: the value must be one :func:`bots.slack_bot.blocks.feedback_blocks`
writes (:func:`~bots.slack_bot.blocks.parse_feedback`: at most 2,000 characters, a user id
and a Slack ts, no control characters); the rater must be inside the allow-lists
(:mod:`core.chat.controls`, as for messages and commands; outside them the click is answered
with :data:`~core.chat.controls.NOT_ENABLED`); and the store must hold the rater's own
message at that ts in that channel, answered (:meth:`FeedbackStore.answered_message`), so no
rating of an answer that does not exist, or of someone else's, is ever stored. Daily caps do
not apply (a rating spends no tokens) and neither does the memory mode (a rating is about
the answer, not a memory).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond

from bots.slack_bot.blocks import FEEDBACK_ACTION, parse_feedback
from bots.slack_bot.commands import slack_place, user_key
from core.chat.controls import NOT_ENABLED, Controls
from core.store.seams import FeedbackStore

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]

ONLY_THE_ASKER = "Only the person who asked can rate this answer."


class SlackFeedback:
    """The feedback button listener over a :class:`FeedbackStore`."""

    def __init__(
        self, store: FeedbackStore, *, install_id: str, controls: Controls | None = None
    ) -> None:
        self.store = store
        self.install_id = install_id
        self.controls = controls

    def register(self, app: AsyncApp) -> None:
        app.action(FEEDBACK_ACTION)(self.on_feedback)

    async def on_feedback(
        self, ack: AsyncAck, body: JsonDict, action: JsonDict, respond: AsyncRespond
    ) -> None:
        user = cast(JsonDict, body.get("user") or {})
        clicker = str(user.get("id") or "")
        parsed = parse_feedback(str(action.get("value") or ""))
        if parsed is None or not clicker:
            logger.info("feedback click with a malformed value ignored")
            await ack()
            return
        positive, asker, answers_ts = parsed
        if clicker != asker:
            await ack()
            await respond(text=ONLY_THE_ASKER, response_type="ephemeral", replace_original=False)
            logger.info("feedback by user=%s on another's answer refused", clicker)
            return
        team = str(cast(JsonDict, body.get("team") or {}).get("id") or user.get("team_id") or "")
        channel = str(
            cast(JsonDict, body.get("channel") or {}).get("id")
            or cast(JsonDict, body.get("container") or {}).get("channel_id")
            or ""
        )
        key = user_key(self.install_id, clicker)
        place = slack_place(key=key, team=team, channel=channel)
        if self.controls is not None and not self.controls.allows(place):
            await ack()
            await respond(text=NOT_ENABLED, response_type="ephemeral", replace_original=False)
            logger.info("feedback by user=%s outside the allow-lists refused", key)
            return
        # The store's error propagates: not acknowledged, Slack shows the click as failed.
        # Conversation keys carry the installation's id, as memory keys do (events.py).
        conversation = f"slack:{self.install_id}:{channel}"
        if not await self.store.answered_message(
            user_key=key, platform_ref=answers_ts, conversation_prefix=conversation
        ):
            await ack()
            logger.info("feedback by user=%s on no answer of theirs refused", key)
            return
        await self.store.record_feedback(
            answer_ref=f"slack:{team}:{channel}:{answers_ts}",
            user_key=key,
            workspace=team or None,
            positive=positive,
        )
        await ack()
        logger.info("feedback stored: user=%s positive=%s", clicker, positive)
