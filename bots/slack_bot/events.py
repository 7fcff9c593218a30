"""Slack conversations: which messages the bot answers, exactly once, and how.

- a DM (``message.im``) is answered in the DM (in its thread, for a message in a DM thread);
  memory origin ``private``; conversation key ``slack:{install}:{channel}``. The first DM with
  a user starts with :data:`DM_NOTICE`;
- a mention in a channel is answered in that message's thread; later messages in a thread
  the bot has answered in are answered without a new mention; origin ``shared``;
  conversation key ``slack:{install}:{channel}:{thread_ts}``. When first mentioned in a thread
  it has not seen, the thread so far is read once (``conversations.replies``) and stored as
  history, each message under its author's key (never reflected: only the speaker's own
  message is); the store is the source after that;
- a group DM (``message.mpim``, several people and the bot) is a shared place, answered as a
  channel is: when mentioned, in the message's thread, then every message in that thread;
  origin ``shared``, so what someone told the bot privately is never recalled there;
- a ``thread_broadcast`` (a thread reply also sent to the channel) is a thread message like
  any other; it arrives once as that (and, with a mention, as ``app_mention`` too: one claim);
- files: a message with files (subtype ``file_share``, or a mention carrying ``files``) is
  answered like any other, the files read for the answer by :mod:`core.files`
  (:mod:`bots.slack_bot.files`: the token goes only to Slack's file host);
- ignored: the bot's own messages, other bots, and every other message subtype (edits,
  deletions, joins ...: :data:`ANSWERED_SUBTYPES`);
- memory key ``slack:{install}:{user}`` of the writer (:func:`bots.slack_bot.commands.user_key`);
  ``install`` in both keys is the one team rule (:attr:`BotIdentity.install_id`: the
  workspace, or the enterprise of an org-wide Enterprise Grid install), never the event's
  own team, which differs per workspace of a Grid org (the event's team is kept as the
  turn's ``workspace``: allow-lists, caps, the edit budget, stream recipients);
- outside the team allow-lists (:mod:`core.chat.controls`) the bot is silent in channels and
  answers a DM with :data:`core.chat.controls.NOT_ENABLED`. Daily caps end a reply early with a
  note saying when they reset (``LimitReached`` from the turn loop).

The rules below are :mod:`core.chat.intake`'s (one for every platform); this module gives
them Slack's keys and wire format (:class:`SlackReplyPlace`).

Exactly once: before answering, a message is claimed in the store by ``event:{event_id}``
and ``msg:{channel}:{ts}`` (a retry carries the same event id; a channel mention arrives as
both ``app_mention`` and ``message`` with one channel+ts), so a duplicate is dropped, also
across restarts; deliveries of a message already in flight in this process are dropped
too, and so are messages another live process sharing the store has claimed
(``event_claimed_elsewhere``). A claimed message whose stored user turn has no answer
(the process that claimed it died mid-answer) is answered when Slack redelivers it, once, on
the stored turn.

Durable intake (never acknowledge what was not stored): the event is acknowledged only
after the message is claimed and stored (a few milliseconds of SQLite; Slack allows 3 s;
an unseen thread is read first, within :data:`THREAD_READ_BEFORE_ACK_S`), and the answer
runs after the acknowledgement. When storing fails (disk full, the database locked past its
busy timeout, any store error) :meth:`SlackConversations.receive` raises ``IntakeFailed``
and the event is not acknowledged (HTTP 500 / no Socket Mode ack), so Slack redelivers it;
a retry that arrives while the first delivery is still being stored shares its outcome. A
crash before the acknowledgement makes Slack redeliver the event; after it, Slack will not,
so the next start-up answers stored messages left without an answer
(:meth:`SlackConversations.recover`, within :data:`core.chat.intake.RECOVERY_WINDOW`).

An interrupted answer (the process died after showing some or all of it, before storing it
when Slack showed it whole; a Slack error before the final edit leaves it unstored too) is
answered again, by a redelivery or the start-up recovery,
only if the turn still has no answer, and into the message it left on screen: every answer
message carries Slack message metadata naming the message it answers
(:func:`bots.slack_bot.sink.reply_metadata`), and :meth:`SlackConversations.shown_reply` finds
it, so the user sees one answer, never a second copy. A native stream takes metadata only
when it stops, so each stream's ``ts`` is recorded with the turn as soon as
``chat.startStream`` returns it (:meth:`core.chat.intake.Intake.record_reply`); the recovery
stops such a stream (if Slack has not ended it) and edits it into the answer.

Answers stream natively in threads (``chat.startStream``/``appendStream``/``stopStream``,
:mod:`core.streaming.native`), else by ``chat.update`` edits (:mod:`core.streaming.reply`
over :class:`bots.slack_bot.sink.SlackReplySink`), with one ``chat.update`` budget per
workspace; the last message of every finished answer carries the feedback buttons.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from aiohttp import ClientError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot.blocks import feedback_blocks
from bots.slack_bot.commands import user_key
from bots.slack_bot.files import file_origins, file_refs
from bots.slack_bot.places import CHANNEL_TYPES, ChannelKinds, slack_workspace
from bots.slack_bot.platform import edit_budgets, settings_stream_config
from bots.slack_bot.revocation import REFUSED_BOT_TOKEN_ERRORS
from bots.slack_bot.sink import (
    SlackReplySink,
    StatusIndicator,
    StreamingSupport,
    answers_of,
    reply_metadata,
)
from core.chat.controls import NOT_ENABLED, Place
from core.chat.intake import Intake, Received
from core.chat.loop import ContextMessage, IncomingMessage, TurnLoop
from core.errors import IntakeFailed
from core.files import FileRef
from core.settings import Settings
from core.streaming.native import NativeReply
from core.streaming.reply import stream_reply
from core.types import Place as MemoryPlace
from core.types import PlaceKind, Turn

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]

DM_NOTICE = (
    "_I remember what you tell me, to help you later: `/memories` shows what I keep, "
    "`/forget` deletes it, `/memory pause` stops me learning._\n\n"
)
EMPTY_TEXT = "(a message with no text)"
MAX_THREAD_CONTEXT_READ = 1000
"""At most this many thread messages are read when the bot joins a thread late."""
THREAD_READ_BEFORE_ACK_S = 1.5
"""At most this long is spent reading an unseen thread before the acknowledgement (of
Slack's 3 s); what is not read by then is left out of its history."""
MAX_REPLY_SCAN = 1000
"""At most this many messages are read to find an answer a crash left on screen."""
ANSWERED_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})
"""Message subtypes answered like a plain message (docs.slack.dev/reference/events/message:
``thread_broadcast`` is a thread reply also shown in the channel, ``file_share`` a message
with files)."""


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is in its workspace (from ``auth.test``)."""

    team_id: str
    user_id: str
    bot_id: str | None
    enterprise_id: str | None = None
    org_install: bool = False
    """An org-wide Enterprise Grid install (``auth.test`` ``is_enterprise_install``)."""

    @property
    def mention(self) -> str:
        return f"<@{self.user_id}>"

    @property
    def install_id(self) -> str:
        """The team part of every user key (:func:`bots.slack_bot.commands.user_key`): the
        ``enterprise_id`` of an org-wide Grid install, else the workspace's ``team_id``."""
        if self.org_install and self.enterprise_id:
            return self.enterprise_id
        return self.team_id


@dataclass(frozen=True)
class SlackMessage:
    """A user's Slack message the bot may answer, parsed from an event."""

    event_id: str
    team: str
    channel: str
    user: str
    ts: str
    thread_ts: str | None
    text: str
    is_dm: bool
    mentioned: bool
    install: str = ""
    """The installation's id (:attr:`BotIdentity.install_id`); empty: ``team``."""
    group_dm: bool = False
    """Said in a group DM (``channel_type`` ``mpim``): shared, answered as in a channel."""
    files: tuple[FileRef, ...] = ()
    """The message's files (``file_share``), read for the answer only."""
    kind: PlaceKind | None = None
    """The conversation's kind (:mod:`bots.slack_bot.places`); None until known (an
    ``app_mention`` has no ``channel_type``: :meth:`SlackConversations.receive` reads it)."""
    enterprise: str | None = None
    """The Enterprise Grid org the event came from (the envelope's ``enterprise_id``)."""
    connect: bool = False
    """Said in a Slack Connect channel (the envelope's ``is_ext_shared_channel``)."""
    stored_place: MemoryPlace | None = None
    """The place stored with the turn (a message rebuilt from a turn by the recovery)."""

    @property
    def memory_place(self) -> MemoryPlace:
        """Where it was said (:class:`core.types.Place`, :mod:`bots.slack_bot.places`'s
        rules): what may be recalled here and where what is learned from it may be used."""
        if self.stored_place is not None:
            return self.stored_place
        kind: PlaceKind = self.kind or ("dm" if self.is_dm else "private_channel")
        return MemoryPlace(
            platform="slack",
            kind=kind,
            workspace=slack_workspace(
                team=self.team,
                enterprise=self.enterprise,
                connect=self.connect,
                channel=self.channel,
            ),
            channel=self.channel,
        )

    @property
    def user_key(self) -> str:
        return user_key(self.install or self.team, self.user)

    @property
    def conversation_key(self) -> str:
        """``slack:{install}:{channel}`` (DM) or ``slack:{install}:{channel}:{thread}``; the
        team part is the memory key's (:attr:`BotIdentity.install_id`), so the start-up
        recovery finds every workspace's turns of an org-wide install under one prefix."""
        team = self.install or self.team
        if self.is_dm:
            return f"slack:{team}:{self.channel}"
        return f"slack:{team}:{self.channel}:{self.thread_ts or self.ts}"

    @property
    def place(self) -> Place:
        """Where it was said, for the team allow-lists."""
        return Place(
            platform="slack",
            user_key=self.user_key,
            workspace=self.team,
            channel=self.channel,
            private=self.is_dm,
        )

    @property
    def claim_keys(self) -> list[str]:
        return [f"event:{self.event_id}", f"msg:{self.channel}:{self.ts}"]

    @property
    def in_thread(self) -> bool:
        """A reply inside an existing thread (not the thread's root)."""
        return self.thread_ts is not None and self.thread_ts != self.ts

    @property
    def reply_thread_ts(self) -> str | None:
        """Where the answer goes: a DM answers in place, a channel message in its thread."""
        return self.thread_ts if self.is_dm else (self.thread_ts or self.ts)


def message_of_turn(turn: Turn) -> SlackMessage | None:
    """Rebuild the Slack message of a stored user turn (keys as in :class:`SlackMessage`):
    its workspace from the turn's ``workspace``, a DM thread from its ``thread_ref``."""
    conv = turn.conversation_key.split(":")
    who = (turn.user_key or "").split(":")
    if len(conv) not in (3, 4) or conv[0] != "slack" or len(who) != 3 or not turn.platform_ref:
        return None
    is_dm = len(conv) == 3
    return SlackMessage(
        event_id=f"recovered-{turn.id}",
        team=turn.workspace or conv[1],
        channel=conv[2],
        user=who[2],
        ts=turn.platform_ref,
        thread_ts=turn.thread_ref if is_dm else conv[3],
        text=turn.text,
        is_dm=is_dm,
        mentioned=not is_dm,
        install=who[1],
        stored_place=turn.place,
    )


def slack_time(ts: str) -> datetime:
    """A Slack ``ts`` (``"1732881234.000100"``) as an aware UTC datetime."""
    return datetime.fromtimestamp(float(ts), UTC)


class SlackConversations:
    """Turns Slack message events into answered turns over one turn loop and store.

    ``client`` reads threads (it may retry 429s); ``stream_client`` posts and edits the
    answers (it must not: the streamed reply waits and coalesces instead).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        loop: TurnLoop,
        intake: Intake,
        identity: BotIdentity,
        client: AsyncWebClient,
        stream_client: AsyncWebClient,
    ) -> None:
        self.settings = settings
        self.loop = loop
        self.intake = intake
        self.identity = identity
        self.client = client
        self.stream_client = stream_client
        self.stream_config = settings_stream_config(settings)
        self.budgets = edit_budgets(updates_per_minute=settings.slack_updates_per_minute)
        self.status = StatusIndicator(stream_client)
        self.streaming = StreamingSupport(enabled=settings.slack_streaming == "native")
        self._mention = re.compile(rf"<@{re.escape(identity.user_id)}(\|[^>]*)?>[ \t]*")
        self._origins = file_origins(settings.slack_api_url)
        self.kinds = ChannelKinds(client)

    def _without_mention(self, raw: str) -> str:
        """``raw`` without the bot's mentions (and the spaces after each), its ends stripped:
        line breaks, indentation and code blocks kept as the person wrote them."""
        return self._mention.sub("", raw).strip()

    def parse(self, body: JsonDict) -> SlackMessage | None:
        """The user message in an ``event_callback`` body, or None when it is to be ignored
        (another event type, a subtype not in :data:`ANSWERED_SUBTYPES`, a bot, the bot itself,
        no text)."""
        event = cast(JsonDict, body.get("event") or {})
        kind, subtype = event.get("type"), event.get("subtype")
        user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
        if kind not in ("message", "app_mention") or subtype not in ANSWERED_SUBTYPES:
            logger.debug("ignored slack %s subtype=%s", kind, subtype)
            return None
        if event.get("bot_id") or not user or user == self.identity.user_id:
            return None
        if not channel or not ts:
            return None
        channel_type = event.get("channel_type")
        is_dm = channel_type == "im" if channel_type else str(channel).startswith("D")
        raw = str(event.get("text") or "")
        mentioned = kind == "app_mention" or self._mention.search(raw) is not None
        files = file_refs(event.get("files"), token=self.client.token or "", origins=self._origins)
        text = self._without_mention(raw) or ("" if files else EMPTY_TEXT)
        thread_ts = event.get("thread_ts")
        return SlackMessage(
            event_id=str(body.get("event_id") or f"{channel}-{ts}"),
            team=str(body.get("team_id") or event.get("team") or self.identity.team_id),
            channel=str(channel),
            user=str(user),
            ts=str(ts),
            thread_ts=str(thread_ts) if thread_ts else None,
            text=text,
            is_dm=is_dm,
            mentioned=mentioned,
            install=self.identity.install_id,
            group_dm=channel_type == "mpim",
            files=files,
            kind=CHANNEL_TYPES.get(str(channel_type)) if channel_type else None,
            enterprise=str(body.get("enterprise_id") or "") or self.identity.enterprise_id,
            connect=bool(body.get("is_ext_shared_channel")),
        )

    async def handle(self, message: SlackMessage) -> None:
        """Answer ``message`` once (see the module docstring); raises ``IntakeFailed`` when
        it could not be stored, else never."""
        work = await self.receive(message)
        if work is not None:
            await work

    async def receive(self, message: SlackMessage) -> Coroutine[Any, Any, None] | None:
        """Before the event is acknowledged: decide, then claim and store the user's message
        (:meth:`core.chat.intake.Intake.receive`).

        Returns the work that answers it (to run after the acknowledgement), or None when
        there is nothing to answer (ignored, a duplicate, already answered). Once it returns
        the message is in the store, so a crash after the acknowledgement loses nothing.

        Raises ``IntakeFailed`` when the message could not be stored (disk full, database
        locked, any store error): the caller must not acknowledge the event, so that Slack
        redelivers it. A duplicate delivery that arrives while the first one is still being
        stored waits for it and shares its outcome (acknowledged only if it was stored).
        """
        key = message.conversation_key
        allowed = self.loop.controls.allows(message.place)
        if not allowed and not message.is_dm:
            return None  # outside the team allow-lists the bot stays silent in channels
        shared_thread = message.in_thread and not message.is_dm
        try:
            known = shared_thread and await self.intake.has_history(key)
        except Exception as exc:
            raise IntakeFailed(f"slack event {message.event_id} could not be read") from exc
        if not (message.is_dm or message.mentioned or known):
            return None
        message = await self.placed(message)
        before_store = None
        if shared_thread and not known:
            # First mention in a thread the bot has not seen: its earlier messages are
            # stored first (they come first in its history), bounded so that the message
            # itself is still stored before Slack's 3 s acknowledgement deadline.
            async def before_store() -> None:
                try:
                    async with asyncio.timeout(THREAD_READ_BEFORE_ACK_S):
                        await self.read_thread(message)
                except TimeoutError:
                    logger.warning("thread %s read cut short to store the message in time", key)

        received = await self.intake.receive(
            self.incoming(message),
            flight_key=flight_key(message),
            claim_keys=message.claim_keys,
            say=None if allowed else NOT_ENABLED,
            before_store=before_store,
        )
        if received is None:
            return None
        return self._finish(message, received)

    async def placed(self, message: SlackMessage) -> SlackMessage:
        """``message`` with its kind known: from its ``channel_type``, else read once per
        channel (:class:`bots.slack_bot.places.ChannelKinds`)."""
        if message.kind is not None:
            self.kinds.note(message.channel, message.kind, message.connect)
            return message
        kind, connect, _ = await self.kinds.lookup(message.channel)
        return dataclasses.replace(message, kind=kind, connect=message.connect or connect)

    async def recover(self, turn: Turn) -> Coroutine[Any, Any, None] | None:
        """The work that answers a stored message a crash left unanswered, or None when it
        cannot be placed (not a Slack turn of this workspace), is already in flight, or
        another process recovers it."""
        message = message_of_turn(turn)
        if message is None:
            return None
        received = await self.intake.recovered(turn, flight_key=flight_key(message))
        if received is None:
            return None
        return self._finish(message, received)

    async def _finish(self, message: SlackMessage, received: Received) -> None:
        try:
            await self.intake.respond(
                self.incoming(message),
                received,
                SlackReplyPlace(self, message, turn_id=received.turn_id),
                notice=DM_NOTICE if message.is_dm else None,
                notice_mark=f"slack-dm-notice:{message.user_key}" if message.is_dm else None,
            )
        except SlackApiError as exc:
            code = str(exc.response.get("error") or "")
            if code not in REFUSED_BOT_TOKEN_ERRORS:
                logger.exception("slack event %s failed", message.event_id)
            else:  # the token watch stops the process with the line that names the fix
                logger.warning("slack event %s not answered: %s", message.event_id, code)
        except Exception:
            logger.exception("slack event %s failed", message.event_id)

    async def shown_reply(self, message: SlackMessage) -> list[str]:
        """The ``ts`` of the bot's messages already on Slack in answer to ``message``, oldest
        first: what a crash between showing an answer and storing it (``Delivery.done``)
        left on screen.

        Read from Slack itself (``conversations.history`` after the message at the top of a
        DM, ``conversations.replies`` in a thread, a DM thread too: history has no thread
        replies; at most :data:`MAX_REPLY_SCAN` messages):
        the bot's own messages whose metadata says they answer ``message.ts``
        (:func:`bots.slack_bot.sink.answers_of`). Empty when there are none or Slack cannot be
        read (then the answer goes to a new message, as before).
        """
        found: list[JsonDict] = []
        cursor: str | None = None
        scanned = 0
        try:
            while scanned < MAX_REPLY_SCAN:
                if message.is_dm and message.thread_ts is None:
                    page = await self.client.conversations_history(
                        channel=message.channel,
                        oldest=message.ts,
                        inclusive=False,
                        limit=200,
                        cursor=cursor,
                        include_all_metadata=True,
                    )
                else:
                    page = await self.client.conversations_replies(
                        channel=message.channel,
                        ts=message.thread_ts or message.ts,
                        oldest=message.ts,
                        limit=200,
                        cursor=cursor,
                        include_all_metadata=True,
                    )
                messages = cast(list[JsonDict], page.get("messages") or [])
                scanned += len(messages)
                found += [m for m in messages if self._is_own(m) and answers_of(m) == message.ts]
                cursor = cast(JsonDict, page.get("response_metadata") or {}).get("next_cursor")
                if not page.get("has_more") or not cursor:
                    break
        except (SlackApiError, ClientError) as exc:
            logger.warning("could not read the reply to %s: %s", message.event_id, exc)
            return []
        return [str(m["ts"]) for m in sorted(found, key=lambda m: float(m["ts"]))]

    def _is_own(self, m: JsonDict) -> bool:
        return m.get("user") == self.identity.user_id or (
            self.identity.bot_id is not None and m.get("bot_id") == self.identity.bot_id
        )

    def incoming(self, message: SlackMessage) -> IncomingMessage:
        """The core's view of ``message``."""
        return IncomingMessage(
            user_key=message.user_key,
            conversation_key=message.conversation_key,
            text=message.text,
            origin="private" if message.is_dm else "shared",
            sent_at=slack_time(message.ts),
            author=f"<@{message.user}>",
            platform_ref=message.ts,
            workspace=message.team,
            where=where_said(message),
            thread_ref=message.thread_ts if message.is_dm else None,  # the key has no thread
            files=message.files,
            place=message.memory_place,
        )

    async def answer(
        self,
        message: SlackMessage,
        deltas: AsyncIterator[str],
        *,
        reuse: Sequence[str] = (),
        turn_id: int | None = None,
        cut_streams: Sequence[str] = (),
    ) -> None:
        """Stream ``deltas`` into the DM or thread of ``message``; ``reuse``: the messages
        an interrupted answer left (:meth:`shown_reply`, and ``cut_streams``, the streams it
        recorded, which are stopped first): the first is edited into the new answer instead
        of posting a new message, the rest are deleted. Each stream this answer starts is
        recorded on ``turn_id`` at once (:meth:`core.chat.intake.Intake.record_reply`).
        Returns once Slack shows the whole answer; raises Slack's error otherwise."""
        await self._stop_streams(message, cut_streams)
        streams: list[str] = []

        async def started(ts: str) -> None:
            if turn_id is not None:
                streams.append(ts)
                await self.intake.record_reply(turn_id=turn_id, handles=streams)

        sink = SlackReplySink(
            self.stream_client,
            channel=message.channel,
            thread_ts=message.reply_thread_ts,
            status=self.status,
            status_thread_ts=message.thread_ts or message.ts,
            reuse_ts=reuse[0] if reuse else None,
            answers_ts=message.ts,
            recipient_user_id=message.user,
            recipient_team_id=message.team,
            streaming=self.streaming,
            final_blocks=feedback_blocks(asker=message.user, answers_ts=message.ts),
            on_stream_started=started,
        )
        for stale in reuse[1:]:
            try:
                await self.stream_client.chat_delete(channel=message.channel, ts=stale)
            except (SlackApiError, ClientError) as exc:
                logger.warning("could not delete a cut reply message: %s", exc)
        limiter = self.budgets.for_scope(f"slack:{message.team}")
        # Native streaming in threads; a cut answer left on screen is taken over by edits.
        native = NativeReply(sink, self.stream_config, limiter=limiter)
        result = await stream_reply(
            sink,
            deltas,
            self.stream_config,
            limiter=limiter,
            reply=native if sink.can_stream and not reuse else None,
        )
        logger.info(
            "slack event %s answered: messages=%d edits=%d error=%s",
            message.event_id,
            len(result.messages),
            sum(result.edit_counts),
            type(result.error).__name__ if result.error else None,
        )

    async def _stop_streams(self, message: SlackMessage, streams: Sequence[str]) -> None:
        """Stop each of ``streams`` that is still live (a crash cut it), marked as an
        answer to ``message``, so that it can be edited or deleted like any message (and is
        found by its metadata from now on). Slack ends a stream only on
        ``chat.stopStream`` or after its own timeout (a few minutes; then
        ``message_not_in_streaming_state``, and ``chat.update`` is the way to change it:
        python-slack-sdk#1859); errors are expected for messages no longer streaming."""
        for ts in streams:
            try:
                await self.stream_client.chat_stopStream(
                    channel=message.channel, ts=ts, metadata=reply_metadata(message.ts)
                )
            except (SlackApiError, ClientError) as exc:
                logger.debug("cut reply %s not stopped: %s", ts, exc)
            else:
                logger.info("stopped a stream a crash left open (%s)", ts)

    async def read_thread(self, message: SlackMessage) -> None:
        """Store the thread so far as history, once (first mention in an unseen thread)."""
        key = message.conversation_key
        if not await self.intake.once(f"slack-thread-read:{key}"):
            return
        assert message.thread_ts is not None
        try:
            earlier = await self._thread_messages(message.channel, message.thread_ts, message.ts)
        except (SlackApiError, ClientError) as exc:
            logger.warning("could not read thread %s: %s", key, exc)
            return
        keep = 2 * self.settings.history_turns
        parsed = [self._context_message(message.team, m) for m in earlier]
        context = [c for c in parsed if c is not None][-keep:] if keep else []
        await self.loop.seed_context(conversation_key=key, origin="shared", messages=context)
        logger.info("read thread %s: %d earlier messages stored", key, len(context))

    async def _thread_messages(self, channel: str, thread_ts: str, before: str) -> list[JsonDict]:
        messages: list[JsonDict] = []
        cursor: str | None = None
        while len(messages) < MAX_THREAD_CONTEXT_READ:
            page = await self.client.conversations_replies(
                channel=channel, ts=thread_ts, cursor=cursor, limit=200
            )
            messages.extend(cast(list[JsonDict], page.get("messages") or []))
            cursor = cast(JsonDict, page.get("response_metadata") or {}).get("next_cursor")
            if not page.get("has_more") or not cursor:
                break
        return [m for m in messages if float(m.get("ts", 0)) < float(before)]

    def _context_message(self, team: str, m: JsonDict) -> ContextMessage | None:
        if m.get("subtype") not in (None, "bot_message", "thread_broadcast"):
            return None
        text = self._without_mention(str(m.get("text") or ""))
        if not text:
            return None
        sent_at = slack_time(str(m["ts"]))
        user = m.get("user")
        if self._is_own(m):
            return ContextMessage(text=text, role="assistant", sent_at=sent_at)
        if m.get("bot_id") or not user:
            name = str(m.get("username") or m.get("bot_id") or "a bot")
            return ContextMessage(text=text, author=name, sent_at=sent_at)
        return ContextMessage(
            text=text,
            author=f"<@{user}>",
            user_key=user_key(self.identity.install_id, str(user)),
            sent_at=sent_at,
        )


def where_said(message: SlackMessage) -> str:
    """Where ``message`` was said, in the words the prompt uses."""
    if message.is_dm:
        return "a Slack DM"
    return "a Slack group DM thread" if message.group_dm else "a Slack channel thread"


def flight_key(message: SlackMessage) -> str:
    """One Slack message in this process (an event and its retries, both event types)."""
    return f"slack:{message.channel}:{message.ts}"


class SlackReplyPlace:
    """The :class:`core.chat.intake.ReplyPlace` of one Slack message."""

    def __init__(
        self, conversations: SlackConversations, message: SlackMessage, *, turn_id: int | None
    ) -> None:
        self._conversations = conversations
        self._message = message
        self._turn_id = turn_id
        self._recorded: list[str] = []

    async def shown_reply(self) -> list[str]:
        """The answer messages found on Slack by their metadata, and the streams the
        interrupted answer recorded (a stream cut before ``chat.stopStream`` has none)."""
        found = await self._conversations.shown_reply(self._message)
        if self._turn_id is not None:
            recorded = await self._conversations.intake.recorded_reply(turn_id=self._turn_id)
            self._recorded = recorded
        return sorted(set(found) | set(self._recorded), key=float)

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        await self._conversations.answer(
            self._message,
            deltas,
            reuse=reuse,
            turn_id=self._turn_id,
            cut_streams=[ts for ts in self._recorded if ts in reuse],
        )

    async def say(self, text: str) -> None:
        await self._conversations.stream_client.chat_postMessage(
            channel=self._message.channel, thread_ts=self._message.thread_ts, markdown_text=text
        )
