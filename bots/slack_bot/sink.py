"""The Slack side of a streamed reply: a :class:`core.streaming.reply.ReplySink` over the Web API.

``post`` is ``chat.postMessage`` and ``edit`` is ``chat.update``, both with ``markdown_text``
(standard Markdown, slack_sdk >= 3.37) and never with ``text`` or ``blocks`` beside it
(Slack refuses the mix with ``markdown_text_conflict``). A finished answer's last message
(``post_final`` / ``edit_final``, :class:`core.streaming.reply.FinishingSink`) carries the
``final_blocks`` (the feedback buttons) instead: its text goes as a ``markdown`` block (the
same standard Markdown; at most 12,000 characters over a message's markdown blocks,
https://docs.slack.dev/reference/block-kit/blocks/markdown-block), the buttons after it,
and ``text`` holds the same words for notifications. Errors, mapped for
:mod:`core.streaming.reply`:

- HTTP 429 -> ``RateLimited(Retry-After)``; the client given here must not retry 429s
  itself, so that the streamed reply can wait and coalesce the text that arrives meanwhile;
- ``msg_too_long``, ``message_not_found``, ``cant_update_message``, ``edit_window_closed``
  from ``chat.update`` -> ``EditFailed`` (the rest of the text goes to a new message);
- anything else is a platform error and propagates as ``SlackApiError``.

Native streaming (:meth:`SlackReplySink.open_stream`, :class:`SlackStream`): slack_sdk's
``chat_stream()`` helper (``AsyncChatStream``: ``chat.startStream`` on the first flush,
``chat.appendStream`` per 256 buffered characters, ``chat.stopStream`` with the last of the
buffer, the feedback ``blocks`` and the reply metadata). Scope ``chat:write``; rate tiers
2 / 4 / 2; a thread reply only (``thread_ts``); ``recipient_user_id`` and
``recipient_team_id`` required outside DMs; ``markdown_text`` at most 12,000 characters
(https://docs.slack.dev/reference/methods/chat.startStream, chat.appendStream,
chat.stopStream). Errors: 429 -> ``RateLimited``; any other Web API error of these methods
-> ``StreamingRefused`` (the reply continues by edits, of the streamed message first:
Slack ends a stream about 5 minutes after it starts, then refuses appends with
``message_not_in_streaming_state`` and shows a "broken pill" until ``chat.update``,
python-slack-sdk #1859; :mod:`core.streaming.native`); one that says the app cannot use
them at all (:data:`STREAMING_UNAVAILABLE_ERRORS`) also switches streaming off for the
process (:class:`StreamingSupport`).

Every text the bot sends as ``markdown_text`` has its mentions made inert
(:func:`bots.slack_bot.blocks.inert_mentions`).

The "is thinking…" status is ``assistant.threads.setStatus``
(https://docs.slack.dev/reference/methods/assistant.threads.setStatus). Slack offers it in
assistant threads only; elsewhere the call fails. Failures are logged at DEBUG and ignored,
and a failure that says the app cannot use the method at all switches it off for the process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot.blocks import MentionEscaper, inert_mentions
from core.errors import EditFailed, RateLimited, StreamingRefused

logger = logging.getLogger(__name__)

JsonDict = dict[str, Any]

EDIT_FAILED_ERRORS = frozenset(
    {"msg_too_long", "message_not_found", "cant_update_message", "edit_window_closed"}
)
"""``chat.update`` errors after which a message can never be edited again."""

STATUS_UNAVAILABLE_ERRORS = frozenset(
    {"missing_scope", "not_allowed_token_type", "unknown_method", "method_deprecated"}
)
"""``assistant.threads.setStatus`` errors that mean the app cannot use the status at all."""

STREAMING_UNAVAILABLE_ERRORS = frozenset(
    {
        "unknown_method",
        "method_deprecated",
        "missing_scope",
        "not_allowed_token_type",
        "feature_not_enabled",
        "team_not_allowed",
    }
)
"""Streaming-method errors that mean the app cannot stream in this workspace at all."""

MARKDOWN_BLOCK_MAX_CHARS = 12_000
"""Characters of all ``markdown`` blocks of one message together (docs.slack.dev,
markdown block)."""

STREAM_MAX_CHARS = 12_000 - 32
"""Characters one streamed message holds: Slack's 12,000 ``markdown_text`` limit
(docs.slack.dev/reference/methods/chat.appendStream), less room for a closing code fence."""

DEFAULT_RETRY_AFTER_S = 1.0

REPLY_EVENT_TYPE = "selfmind_reply"
"""Slack message metadata ``event_type`` of the bot's answer messages
(https://docs.slack.dev/messaging/message-metadata); the payload names the message answered."""


def reply_metadata(answers_ts: str) -> JsonDict:
    """The metadata of an answer message to the user message ``answers_ts``."""
    return {"event_type": REPLY_EVENT_TYPE, "event_payload": {"answers_ts": answers_ts}}


def answers_of(message: JsonDict) -> str | None:
    """The ``ts`` of the user message a bot message answers (its metadata), or None."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != REPLY_EVENT_TYPE:
        return None
    payload = metadata.get("event_payload")
    value = payload.get("answers_ts") if isinstance(payload, dict) else None
    return str(value) if value else None


def slack_error(exc: SlackApiError) -> str:
    """The Web API error code of ``exc`` (``"ratelimited"``, ``"invalid_auth"`` ...)."""
    response = exc.response
    try:
        return str(response.get("error") or "unknown_error")
    except AttributeError:
        return "unknown_error"


def retry_after_s(exc: SlackApiError) -> float | None:
    """Seconds to wait for a 429 (its ``Retry-After`` header), None for other errors."""
    if exc.response.status_code != 429:
        return None
    headers = {k.lower(): v for k, v in (exc.response.headers or {}).items()}
    value = headers.get("retry-after")
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return max(0.0, float(value)) if value is not None else DEFAULT_RETRY_AFTER_S
    except ValueError:
        return DEFAULT_RETRY_AFTER_S


LOADING_MESSAGES = ("Recalling what you told me…", "Thinking it over…", "Writing it down…")
"""What the status says while an answer is recalled and thought over
(``assistant.threads.setStatus`` ``loading_messages``, docs.slack.dev; Slack rotates them)."""


class StatusIndicator:
    """Slack's "is thinking…" status for one process; off for good once Slack refuses it."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        self.available = True

    async def show(self, *, channel: str, thread_ts: str, text: str | None) -> None:
        """Show ``text`` under the thread (``None`` clears it); never raises a Slack error."""
        if not self.available:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=channel,
                thread_ts=thread_ts,
                status=text or "",
                # Slack rotates these while the status shows; an empty status clears it.
                loading_messages=list(LOADING_MESSAGES) if text else None,
            )
        except SlackApiError as exc:
            error = slack_error(exc)
            if error in STATUS_UNAVAILABLE_ERRORS:
                self.available = False
            logger.debug("assistant.threads.setStatus failed: %s", error)


class StreamingSupport:
    """Whether native streaming is worth trying in this process: off for good once Slack
    answers a streaming call with one of :data:`STREAMING_UNAVAILABLE_ERRORS`."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.available = enabled

    def refused(self, error: str) -> StreamingRefused:
        """The exception for a refused streaming call; remembers a refusal for good."""
        if error in STREAMING_UNAVAILABLE_ERRORS and self.available:
            self.available = False
            logger.warning("slack refuses native streaming (%s): answering by edits", error)
        return StreamingRefused(error)


class SlackStream:
    """One message streamed with slack_sdk's ``AsyncChatStream`` (a :class:`NativeStream`)."""

    def __init__(self, sink: SlackReplySink, *, max_chars: int = STREAM_MAX_CHARS) -> None:
        self._sink = sink
        self._max_chars = max_chars
        self._helper: AsyncChatStream | None = None
        self._chars = 0  # escaped characters given to the helper
        self._escaper = MentionEscaper()  # keeps a trailing "<" until it shows what it opens
        self._announced = False

    @property
    def started(self) -> bool:
        return self.handle is not None

    @property
    def handle(self) -> str | None:
        return self._helper.ts if self._helper is not None else None

    async def append(self, *, text: str, flush: bool = False) -> bool:
        before = self._escaper.held
        out = self._escaper.piece(text)
        if self._chars + len(out) + 4 * len(self._escaper.held) > self._max_chars:
            self._escaper.held = before  # nothing of ``text`` is taken
            raise EditFailed("msg_too_long")
        helper = await self._helper_now()
        self._chars += len(out)
        try:  # the helper buffers ``out`` first, so after a failure it is still to be sent
            response = await helper.append(markdown_text=out, chunks=[] if flush else None)
        except SlackApiError as exc:
            raise self._mapped(exc) from exc
        finally:
            await self._announce(helper)
        return response is not None and not self._escaper.held

    async def _announce(self, helper: AsyncChatStream) -> None:
        """Once ``chat.startStream`` has named the message: tell the sink's
        ``on_stream_started`` (the answer records it: a stream carries no metadata before
        ``chat.stopStream``, so a crash would leave it unfindable)."""
        if self._announced or helper.ts is None:
            return
        self._announced = True
        self._sink.replied()
        self._sink.unmarked.add(helper.ts)  # no metadata until chat.stopStream
        if self._sink.on_stream_started is not None:
            await self._sink.on_stream_started(helper.ts)

    async def stop(self, *, final: bool, text: str = "") -> str:
        helper = await self._helper_now()
        held = self._escaper.flush() + inert_mentions(text)  # room kept: STREAM_MAX_CHARS
        if held:
            self._chars += len(held)
            try:
                await helper.append(markdown_text=held)
            except SlackApiError as exc:
                raise self._mapped(exc) from exc
            finally:
                await self._announce(helper)
        sink = self._sink
        try:
            response = await helper.stop(
                blocks=sink.final_blocks if final and sink.final_blocks else None,
                metadata=reply_metadata(sink.answers_ts) if sink.answers_ts else None,
            )
        except SlackApiError as exc:
            raise self._mapped(exc) from exc
        sink.unmarked.discard(str(helper.ts))
        return str(response.get("ts") or helper.ts)

    async def abandon(self) -> None:
        """``chat.stopStream`` with nothing more (the helper's buffer is dropped: the reply
        goes on by edits from what Slack shows) and the reply metadata, so that the message
        is ended and findable; a failure is logged, not raised."""
        helper = self._helper
        if helper is None or helper.ts is None:
            return
        sink = self._sink
        try:
            await sink.client.chat_stopStream(
                channel=sink.channel,
                ts=helper.ts,
                metadata=reply_metadata(sink.answers_ts) if sink.answers_ts else None,
            )
        except SlackApiError as exc:  # message_not_in_streaming_state: Slack ended it
            logger.info("cut stream %s not stopped: %s", helper.ts, slack_error(exc))
        except (ClientError, TimeoutError) as exc:
            logger.info("cut stream %s not stopped: %s", helper.ts, type(exc).__name__)
        else:
            sink.unmarked.discard(helper.ts)

    async def _helper_now(self) -> AsyncChatStream:
        if self._helper is None:
            sink = self._sink
            assert sink.thread_ts is not None, "a stream is a thread reply"
            self._helper = await sink.client.chat_stream(
                channel=sink.channel,
                thread_ts=sink.thread_ts,
                recipient_user_id=sink.recipient_user_id,
                recipient_team_id=sink.recipient_team_id,
            )
        return self._helper

    def _mapped(self, exc: SlackApiError) -> RateLimited | StreamingRefused:
        wait_s = retry_after_s(exc)
        if wait_s is not None:
            return RateLimited(wait_s)
        return self._sink.streaming.refused(slack_error(exc))


class SlackReplySink:
    """One reply's messages in one Slack channel or thread.

    ``thread_ts`` is the thread the reply goes to (None: the channel itself, e.g. a DM);
    ``status_thread_ts`` the thread whose status shows "is thinking…" (the user's message
    when it starts no thread). ``reuse_ts``: a message of the bot's to take over (an answer
    a crash left on screen): the first ``post`` edits it instead of posting a new one, and
    falls back to posting when it can no longer be edited. ``answers_ts``: the user message
    this reply answers, carried by every posted message as Slack message metadata
    (:data:`REPLY_EVENT_TYPE`, ``{"answers_ts": ts}``) so that a reply a crash cut can be
    found on Slack again (:func:`answers_of`). ``on_stream_started``: awaited with the ``ts``
    of each natively streamed message as soon as ``chat.startStream`` returns it (a stream
    takes metadata only at ``chat.stopStream``), before anything more is appended.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        thread_ts: str | None,
        status: StatusIndicator | None = None,
        status_thread_ts: str | None = None,
        reuse_ts: str | None = None,
        answers_ts: str | None = None,
        recipient_user_id: str | None = None,
        recipient_team_id: str | None = None,
        streaming: StreamingSupport | None = None,
        final_blocks: list[JsonDict] | None = None,
        on_stream_started: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.client = client
        self.on_stream_started = on_stream_started
        self.recipient_user_id = recipient_user_id
        self.recipient_team_id = recipient_team_id
        self.streaming = streaming or StreamingSupport(enabled=False)
        self.final_blocks = final_blocks
        self.reuse_ts = reuse_ts
        self.answers_ts = answers_ts
        self.channel = channel
        self.thread_ts = thread_ts
        self.status_indicator = status
        self.status_thread_ts = status_thread_ts or thread_ts
        self._status_up = False  # shown, and no reply posted in its thread since
        self.unmarked: set[str] = set()
        """Streamed messages without the reply metadata yet (it goes with chat.stopStream):
        an edit of one (the reply took it over) sets it."""

    async def post(self, *, text: str) -> str:
        return await self._post(text, final=False)

    async def post_final(self, *, text: str) -> str:
        """``post`` with the ``final_blocks`` under the text (the answer's last message)."""
        return await self._post(text, final=True)

    async def edit(self, *, handle: str, text: str) -> None:
        await self._edit(handle, text, final=False)

    async def edit_final(self, *, handle: str, text: str) -> None:
        """``edit`` with the ``final_blocks`` under the text (the answer's last message)."""
        await self._edit(handle, text, final=True)

    def content(self, text: str, *, final: bool) -> JsonDict:
        """The message fields for ``text`` (mentions made inert): ``markdown_text``; for a
        final message with ``final_blocks``, a ``markdown`` block, the final blocks and
        ``text`` instead (``markdown_text`` cannot go with blocks). A text too long for a
        markdown block goes as ``markdown_text``, without the final blocks."""
        shown = inert_mentions(text)
        if not (final and self.final_blocks) or len(shown) > MARKDOWN_BLOCK_MAX_CHARS:
            return {"markdown_text": shown}
        return {"text": shown, "blocks": [{"type": "markdown", "text": shown}, *self.final_blocks]}

    async def _post(self, text: str, *, final: bool) -> str:
        reuse, self.reuse_ts = self.reuse_ts, None
        if reuse is not None:
            try:
                await self._edit(reuse, text, final=final, mark=True)
            except EditFailed:
                logger.info("could not take over reply message %s; posting anew", reuse)
            else:
                return reuse
        try:
            response = await self.client.chat_postMessage(
                channel=self.channel,
                thread_ts=self.thread_ts,
                metadata=reply_metadata(self.answers_ts) if self.answers_ts else None,
                **self.content(text, final=final),
            )
        except SlackApiError as exc:
            wait_s = retry_after_s(exc)
            if wait_s is not None:
                raise RateLimited(wait_s) from exc
            raise
        self.replied()
        return str(response["ts"])

    async def _edit(self, handle: str, text: str, *, final: bool, mark: bool = False) -> None:
        """``chat.update``; ``mark``: also set the reply metadata (a message taken over; a
        stream never stopped is marked by its first edit too)."""
        mark = mark or handle in self.unmarked
        metadata = reply_metadata(self.answers_ts) if mark and self.answers_ts else None
        try:
            await self.client.chat_update(
                channel=self.channel,
                ts=handle,
                metadata=metadata,
                **self.content(text, final=final),
            )
        except SlackApiError as exc:
            wait_s = retry_after_s(exc)
            if wait_s is not None:
                raise RateLimited(wait_s) from exc
            error = slack_error(exc)
            if error in EDIT_FAILED_ERRORS:
                raise EditFailed(error) from exc
            raise
        self.unmarked.discard(handle)

    @property
    def can_stream(self) -> bool:
        """Native streaming is possible here: a thread reply, streaming not refused for the
        process, and the recipient ids that channels require."""
        in_dm = self.channel.startswith("D")
        recipient = bool(self.recipient_user_id and self.recipient_team_id)
        return self.streaming.available and self.thread_ts is not None and (in_dm or recipient)

    def open_stream(self) -> SlackStream:
        """A new message in the reply's thread, streamed natively (created by its first
        ``append``)."""
        return SlackStream(self)

    async def status(self, *, text: str | None) -> None:
        """Show or clear the status; a clear after a reply posted in the status's thread is
        not sent: Slack clears the status itself "when the app sends a reply"
        (docs.slack.dev, assistant.threads.setStatus), one Web API call less a turn."""
        if self.status_indicator is None or self.status_thread_ts is None:
            return
        if text is None and not self._status_up:
            return
        await self.status_indicator.show(
            channel=self.channel, thread_ts=self.status_thread_ts, text=text
        )
        self._status_up = text is not None

    def replied(self) -> None:
        """A message of this reply was posted (or a stream started) in its thread."""
        if self.thread_ts is not None and self.thread_ts == self.status_thread_ts:
            self._status_up = False
