"""Native streaming: a reply appended to one message by the platform's streaming methods.

Slack has ``chat.startStream`` / ``chat.appendStream`` / ``chat.stopStream``
(https://docs.slack.dev/reference/methods/chat.startStream): the text is appended, not
re-sent, so a long answer costs a few calls instead of an edit a second. A
:class:`NativeReply` drives one reply through a :class:`NativeSink` (a ``ReplySink`` that can
also ``open_stream()``); it has the interface of :class:`core.streaming.reply.StreamedReply`
and is handed to :func:`core.streaming.reply.stream_reply` as its ``reply``.

- The first text opens the stream at once (``flush=True``); later appends are buffered by the
  platform's own helper (slack_sdk's ``AsyncChatStream``: a call per 256 characters).
- Roll-over: a stream that cannot take more (the sink raises ``EditFailed``: Slack's 12,000
  characters per message) is stopped, with an open code block closed, and the text continues
  in a new stream that reopens the block.
- Fallback to edits, mid-answer, without losing or repeating text: on ``StreamingRefused``
  (the platform refuses the method here), on ``RateLimited`` while opening a stream (waiting
  would stall the first token), or after ``max_rate_limit_retries`` 429s in a row on one
  append or stop. The stream is ended where it is (``NativeStream.abandon``, best effort)
  and the reply goes on through a :class:`StreamedReply` over the same sink that takes the
  streamed message over: its first edit puts the whole text of that message so far into it
  (the unsent buffer included), and the last one the feedback buttons
  (``FinishingSink``), so a stream the platform ended is finished in place and never stays
  a "broken pill" (Slack ends a stream about 5 minutes after ``chat.startStream``; appends
  then fail with ``message_not_in_streaming_state`` and the message shows an error until
  ``chat.update``: python-slack-sdk #1859, PR #1880). The text continues in a new message
  only when it must: past the edit limit (``StreamConfig.max_chars``, below a stream's), or
  when the message cannot be edited (``EditFailed``, e.g. a stream still live): then it
  keeps what it shows and the rest (``text[shown:]``) follows.
- Deltas longer than ``max_piece_chars`` are appended in pieces (a piece never passes the
  platform's per-call limit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from core.errors import EditFailed, RateLimited, SelfMindError, StreamingRefused
from core.streaming.chunking import START, Position, closing_suffix, locate, reopen_prefix
from core.streaming.reply import (
    EditLimiter,
    PostedMessage,
    ReplyResult,
    ReplySink,
    StreamConfig,
    StreamedReply,
    clear_status_quietly,
)

__all__ = ["NativeReply", "NativeSink", "NativeStream"]

logger = logging.getLogger(__name__)

MAX_PIECE_CHARS = 2000
"""Longest text given to one ``append`` (Slack takes up to 12,000 characters a call)."""


class NativeStream(Protocol):
    """One message being streamed natively.

    ``append`` adds ``text`` (``flush``: send it now rather than buffer it) and returns True
    when the platform now shows everything appended so far, False when some is buffered.
    ``stop`` sends what is buffered, then ``text`` (a closing code fence: the stream keeps
    room for it), and ends the message (``final``: the reply's last message, which carries
    what finished answers carry, e.g. feedback buttons); returns its handle.
    Both raise ``RateLimited`` (429; nothing was sent: call again), ``StreamingRefused`` (the
    platform refuses streaming here); ``append`` raises ``EditFailed`` when the message cannot
    take ``text`` (nothing was added: stop it and continue in a new one).
    """

    @property
    def started(self) -> bool:
        """True once the platform has created the message."""
        ...

    @property
    def handle(self) -> str | None:
        """The message's handle once started (Slack: its ``ts``), else None."""
        ...

    async def append(self, *, text: str, flush: bool = False) -> bool: ...

    async def stop(self, *, final: bool, text: str = "") -> str: ...

    async def abandon(self) -> None:
        """End a started message as the platform shows it, without what is buffered (the
        reply then edits it, see :class:`NativeReply`); best effort: never raises."""
        ...


class NativeSink(ReplySink, Protocol):
    """A reply sink that can also stream natively: ``open_stream()`` prepares a new message
    in the reply's thread (created by its first ``append``)."""

    def open_stream(self) -> NativeStream: ...


class NativeReply:
    """One reply streamed with the platform's streaming methods, falling back to edits.

    Same calls as :class:`StreamedReply`: ``start()``, ``feed(delta)``, ``finish()`` or
    ``fail(note)``, ``aclose()``. Platform errors other than the ones above propagate.
    ``limiter``, ``clock`` and ``sleep`` are passed to the fallback; ``sleep`` also waits out
    429s on appends.
    """

    def __init__(
        self,
        sink: NativeSink,
        config: StreamConfig,
        *,
        limiter: EditLimiter | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_piece_chars: int = MAX_PIECE_CHARS,
    ) -> None:
        self._sink = sink
        self._config = config
        self._limiter = limiter
        self._clock = clock
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self._max_piece = max_piece_chars
        self._parts: list[str] = []
        self._length = 0
        self._stream: NativeStream | None = None
        self._start: Position = START  # where the current message starts in the text
        self._queued = 0  # text offset given to the current stream (buffered or shown)
        self._shown = 0  # text offset the platform shows in full
        self._messages: list[PostedMessage] = []
        self._fallback: StreamedReply | None = None
        self._rate_limited = 0
        self._status_shown = False
        self._done = False
        self._error: SelfMindError | None = None

    @property
    def text(self) -> str:
        """All the text fed so far."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    @property
    def fell_back(self) -> bool:
        """True once the reply continues by edits."""
        return self._fallback is not None

    async def start(self) -> None:
        """Show the status indicator (no placeholder: the stream shows the first token)."""
        if self._config.status_text is not None:
            try:
                await self._sink.status(text=self._config.status_text)
                self._status_shown = True
            except RateLimited:
                logger.info("status indicator rate-limited")

    async def feed(self, delta: str) -> None:
        """Append ``delta``; returns once the platform has it (or buffered it)."""
        if self._done:
            raise RuntimeError("this reply is already finished or closed")
        if not delta:
            return
        self._parts.append(delta)
        self._length += len(delta)
        if self._fallback is not None:
            await self._fallback.feed(delta)
            return
        end = self._length - len(delta)
        for i in range(0, len(delta), self._max_piece):
            piece = delta[i : i + self._max_piece]
            end += len(piece)
            if not await self._send(piece, end):
                return  # fell back: the fallback has all the text from ``shown``

    async def finish(self) -> ReplyResult:
        """Stop the last stream (or finish the fallback) and return what was posted."""
        if self._done:
            raise RuntimeError("this reply is already finished or closed")
        self._done = True
        if self._fallback is None and self._stream is None:
            await self._fall_back("empty answer")  # nothing streamed: the edits path shows it
        if self._fallback is None and self._stream is not None and not await self._stop(final=True):
            await self._fall_back("stop refused")
        if self._fallback is not None and not self._fallback.text and self._shown > 0:
            await self._fallback.aclose()  # the stream shows it all: no "empty" message
        elif self._fallback is not None:
            result = await self._fallback.finish()
            self._messages += result.messages
            self._rate_limited += result.rate_limited
        if self._status_shown:
            self._status_shown = False  # one clear, also when it fails: none again on error
            try:
                await self._sink.status(text=None)
            except RateLimited:  # the indicator is cosmetic, as in StreamedReply
                logger.info("status indicator rate-limited")
        logger.info(
            "native reply finished: messages=%d chars=%d rate_limited=%d fell_back=%s",
            len(self._messages),
            self._length,
            self._rate_limited,
            self._fallback is not None,
        )
        return ReplyResult(self.text, tuple(self._messages), self._rate_limited, self._error)

    async def fail(self, note: str, *, error: SelfMindError | None = None) -> ReplyResult:
        """End the reply early: the text so far, a closed code block, then ``note``."""
        text = self.text
        fence = locate(text, START, len(text)).fence
        tail = closing_suffix(
            fence, after_newline=text.endswith("\n"), max_chars=self._config.max_chars
        )
        separator = "\n\n" if text.strip() else ""
        await self.feed(f"{tail}{separator}⚠️ {note}")
        self._error = error
        return await self.finish()

    async def clear_status(self) -> None:
        """Take down the status indicator if this reply showed it and ``finish`` did not
        (the error path). Never raises."""
        if self._status_shown:
            self._status_shown = False
            await clear_status_quietly(self._sink)

    async def refresh_status(self) -> None:
        """Show the status again if this reply shows it and nothing else yet (no stream
        started, no fallback: the model is still thinking)."""
        text = self._config.status_text
        if not self._status_shown or text is None or self._fallback is not None:
            return
        if self._stream is None or not self._stream.started:
            try:
                await self._sink.status(text=text)
            except RateLimited:
                logger.info("status indicator rate-limited")

    async def aclose(self) -> None:
        """Stop the fallback's background task, if any; no further calls. Safe twice."""
        self._done = True
        if self._fallback is not None:
            await self._fallback.aclose()

    # --- internals

    async def _send(self, piece: str, end: int) -> bool:
        """Append ``piece`` (the text up to ``end``); False when the reply fell back."""
        try:
            if self._stream is None:
                self._stream = self._sink.open_stream()
            first = not self._stream.started
            try:
                await self._append(piece, end, flush=first)
            except EditFailed:
                await self._roll_over(piece, end)
        except StreamingRefused as exc:
            await self._fall_back(exc.reason)
            return False
        except RateLimited:
            await self._fall_back("rate limited")
            return False
        return True

    async def _append(self, piece: str, end: int, *, flush: bool) -> None:
        stream = self._stream
        assert stream is not None
        text, streak = piece, 0
        while True:
            try:
                shows_all = await stream.append(text=text, flush=flush)
                break
            except RateLimited as exc:
                self._rate_limited += 1
                if not stream.started or streak >= self._config.max_rate_limit_retries:
                    raise
                streak += 1
                self._queued = end  # ``piece`` is in the helper's buffer once it got there
                await self._sleep(max(0.0, exc.retry_after_s))
                text, flush = "", True  # send what is buffered
        self._queued = end
        if shows_all:
            self._shown = end

    async def _roll_over(self, piece: str, end: int) -> None:
        """Close the current message at ``end - len(piece)`` and stream ``piece`` in a new one."""
        text = self.text
        cut = end - len(piece)
        at = locate(text, self._start, cut)
        close = closing_suffix(
            at.fence, after_newline=text[:cut].endswith("\n"), max_chars=self._config.max_chars
        )
        if not await self._stop(final=False, text=close):
            raise StreamingRefused("stop refused")
        self._start = at
        self._stream = self._sink.open_stream()
        logger.debug("native reply rolled over at %d chars", cut)
        prefix = reopen_prefix(at.fence, self._config.max_chars)
        await self._append(prefix + piece, end, flush=True)

    async def _stop(self, *, final: bool, text: str = "") -> bool:
        """Stop the current stream; False when the platform refused (then the reply must
        fall back: what was buffered is not shown)."""
        stream = self._stream
        assert stream is not None
        streak = 0
        while True:
            try:
                handle = await stream.stop(final=final, text=text)
                text = ""  # taken, also if a later call of this loop is needed
                break
            except RateLimited as exc:
                self._rate_limited += 1
                if streak >= self._config.max_rate_limit_retries:
                    return False
                streak += 1
                await self._sleep(max(0.0, exc.retry_after_s))
            except StreamingRefused as exc:
                logger.info("native stream stop refused: %s", exc.reason)
                return False
        self._shown = self._queued
        start = self._start.pos
        self._messages.append(
            PostedMessage(
                handle=handle,
                text=self.text[start : self._queued],
                start=start,
                end=self._queued,
                edits=0,
                complete=True,
            )
        )
        self._stream = None
        return True

    async def _fall_back(self, reason: str) -> None:
        """Continue by edits: in the streamed message from its start when there is one
        (taken over), else from the text the platform shows (``text[shown:]``)."""
        logger.info("native streaming fell back to edits (%s) at %d chars", reason, self._shown)
        stream, self._stream = self._stream, None
        text, handle = self.text, None
        if stream is not None and stream.started:
            await stream.abandon()
            handle = stream.handle
        start = self._start if handle is not None else locate(text, START, self._shown)
        prefix = reopen_prefix(start.fence, self._config.max_chars)
        reply = StreamedReply(
            self._sink,
            self._config,
            limiter=self._limiter,
            clock=self._clock,
            sleep=self._sleep,
            take_over=handle,
            shows=len(prefix) + self._shown - start.pos if handle is not None else 0,
        )
        self._fallback = reply
        if start.pos < len(text):
            await reply.feed(prefix + text[start.pos :])
