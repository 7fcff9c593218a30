"""Streamed replies: Claude's answer shown in chat messages that are edited as it arrives.

One :class:`StreamedReply` per reply, over a :class:`ReplySink` (post / edit / status) that
each platform adapter implements; :func:`stream_reply` drives one from an answer stream.
A background task per reply makes every sink call, one at a time and in order:

- the first text is posted as soon as the first delta arrives; with a placeholder (posted by
  ``start()`` while Claude thinks) the first text replaces it at most ``edit_interval_s`` after
  the placeholder was posted;
- edits are throttled by time, not by chunk count: at most one write (post or edit) per
  message per ``edit_interval_s`` seconds; deltas that arrive meanwhile are coalesced;
- each edit first takes a token from an optional shared limiter (:class:`EditBudgets`, one per
  rate-limit scope), so concurrent replies in one Slack workspace slow their edits down
  together instead of running into 429s. Discord sinks pass ``limiter=None``: discord.py
  follows Discord's per-route rate-limit headers itself;
- a busy budget goes to final texts first. A reply **reserves** its final edit when it
  starts (:meth:`EditBudget.reserve`; the token is taken when the edit is made, so the
  budget's window still counts calls as they are made); an interim edit is made only with
  a token free now that no final edit is waiting for (else its text waits for a later
  write). A reply that can reserve nothing when it starts is **held**: no placeholder, and
  its first message is posted when the answer is finished, whole, needing no edit at all,
  or after ``busy_hold_s`` with the text so far (it then streams on, its final edit
  waiting for a token). In a burst, the answers past the budget's first few are posted
  whole instead of waiting minutes for their final edits (bench/load.py
  ``--slack-defaults``);
- while streaming, a message ends with ``writing_marker`` (after a temporary closing fence if
  it is inside a code block); the final edit holds exactly the text; over a
  :class:`FinishingSink` the last message's final write is ``post_final`` / ``edit_final``
  (Slack adds its feedback buttons there), with one more edit only when the last message
  already showed its final text;
- roll-over: when the text would pass ``max_chars`` (marker and fences included), the message
  is closed and the text continues in a new message (split rules: :mod:`core.streaming.chunking`);
- a sink that raises ``RateLimited`` is waited out (``retry_after_s``), then the message is
  edited with the newest text, so nothing is lost or reordered; after
  ``max_rate_limit_retries`` 429s in a row, or on ``EditFailed``, the message stays as last
  shown and the rest of the text continues in a new message;
- any other exception from the sink is a platform error: the task stops and the next
  ``feed()``/``finish()`` raises it unchanged.

Time: ``clock`` and ``sleep`` default to the running event loop's clock and ``asyncio.sleep``
(the clock aiolimiter uses too), so a test loop with virtual time drives all three.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

from aiolimiter import AsyncLimiter

from core.errors import EditFailed, ModelError, RateLimited, SelfMindError, StreamCutError
from core.streaming.chunking import (
    START,
    Position,
    closing_suffix,
    fence_at_end,
    locate,
    reopen_prefix,
    split_message,
)

__all__ = [
    "EditBudget",
    "EditBudgets",
    "EditLimiter",
    "FinishingSink",
    "PostedMessage",
    "Reply",
    "ReplyResult",
    "ReplySink",
    "StreamConfig",
    "StreamedReply",
    "stream_reply",
]

logger = logging.getLogger(__name__)

DEFAULT_WRITING_MARKER = "\n\n_✍️ still writing…_"
DEFAULT_PLACEHOLDER = "_thinking…_"
DEFAULT_STATUS = "is thinking…"
GENERIC_ERROR_NOTE = "Something went wrong while writing this answer."


class ReplySink(Protocol):
    """Where one reply goes: a thread or channel on one platform.

    ``post`` adds a message to the reply's thread and returns its handle (e.g. Slack ``ts``,
    Discord message id); ``edit`` replaces a message's text; ``status`` shows (``text``) or
    clears (``None``) a typing / "is thinking" indicator and may do nothing. ``post`` and
    ``edit`` raise ``RateLimited`` on HTTP 429; ``edit`` raises ``EditFailed`` when the
    message can never be edited again (Slack ``msg_too_long``, message deleted). Texts are
    standard Markdown of at most the configured ``max_chars``.
    """

    async def post(self, *, text: str) -> str: ...

    async def edit(self, *, handle: str, text: str) -> None: ...

    async def status(self, *, text: str | None) -> None: ...


@runtime_checkable
class FinishingSink(ReplySink, Protocol):
    """A sink whose finished answer carries more than its text (Slack: the feedback buttons
    under it). The reply's last write to its last message, the one with the final text,
    goes through ``post_final`` / ``edit_final`` instead of ``post`` / ``edit`` (same
    arguments, same errors); earlier messages of a rolled-over reply never do."""

    async def post_final(self, *, text: str) -> str: ...

    async def edit_final(self, *, handle: str, text: str) -> None: ...


@functools.cache
def _finishes(cls: type) -> bool:
    """Whether ``cls`` is a :class:`FinishingSink`, asked once per class: a runtime protocol
    check walks the protocol's members on every call (Python 3.11), and asked per reply it was
    3.5 % of the bot's CPU at 200 users (py-spy, bench/load.py)."""
    return issubclass(cls, FinishingSink)


class EditLimiter(Protocol):
    """A shared edit budget (:class:`EditBudget`)."""

    async def acquire(self, amount: float = 1) -> None: ...

    def has_capacity(self, amount: float = 1) -> bool: ...

    def reserve(self) -> bool: ...

    def release(self) -> None: ...


class EditBudget:
    """One scope's edit budget: an ``aiolimiter.AsyncLimiter`` leaky bucket (``limiter``), the
    final edits reserved by the replies streaming in the scope (``reserved``) and the calls
    waiting for a token (``waiting``).

    ``acquire()`` takes a token, waiting for one (the writes that must be made: final edits);
    ``has_capacity(n)``: ``n`` tokens free now and no call waiting (an interim edit may go);
    ``reserve()`` admits one more reply to stream by edits when a token is free now beyond
    those reserved (False: the reply is held, see the module docstring); ``release()`` ends
    one reservation (its final edit then takes its token with ``acquire``, or the reply
    ended without one). Tokens are taken when the calls are made, so any 60-second window
    still sees at most the budget's calls."""

    def __init__(self, limiter: AsyncLimiter) -> None:
        self.limiter = limiter
        self.reserved = 0
        self.waiting = 0

    @property
    def max_rate(self) -> float:
        """The bucket's size: the calls allowed at once (the budget's burst)."""
        return self.limiter.max_rate

    async def acquire(self, amount: float = 1) -> None:
        self.waiting += 1
        try:
            await self.limiter.acquire(amount)
        finally:
            self.waiting -= 1

    def has_capacity(self, amount: float = 1) -> bool:
        return not self.waiting and self.limiter.has_capacity(amount)

    def reserve(self) -> bool:
        if not self.has_capacity(1 + self.reserved):  # False too past the bucket's size
            return False
        self.reserved += 1
        return True

    def release(self) -> None:
        self.reserved = max(0, self.reserved - 1)


class EditBudgets:
    """Shared edit budgets: one leaky-bucket limiter per rate-limit scope.

    ``for_scope("slack:T123")`` returns the same :class:`EditBudget` for every reply in that
    scope. The bucket holds ``burst`` tokens and refills at
    ``calls_per_minute - burst`` a minute, so any 60-second window sees at most
    ``calls_per_minute`` calls (burst + refill). Default burst: a tenth of the rate, at least 1.
    Create it inside the running event loop that uses it (aiolimiter binds to one loop).
    Raises ``ValueError`` unless ``0 < burst < calls_per_minute``.
    """

    def __init__(self, *, calls_per_minute: float, burst: int | None = None) -> None:
        burst = max(1, int(calls_per_minute // 10)) if burst is None else burst
        if not 0 < burst < calls_per_minute:
            raise ValueError(f"need 0 < burst ({burst}) < calls_per_minute ({calls_per_minute})")
        self.calls_per_minute = calls_per_minute
        self.burst = burst
        self._period_s = burst * 60.0 / (calls_per_minute - burst)
        self._limiters: dict[str, EditBudget] = {}

    def for_scope(self, scope: str) -> EditBudget:
        """The budget shared by every reply in ``scope``."""
        limiter = self._limiters.get(scope)
        if limiter is None:
            limiter = self._limiters[scope] = EditBudget(AsyncLimiter(self.burst, self._period_s))
            logger.info(
                "edit budget for %s: %s a minute, burst %s",
                scope,
                self.calls_per_minute,
                self.burst,
            )
        return limiter


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """How replies stream on one platform (each adapter makes its own: ``stream_config()``
    in its ``platform.py``).

    ``max_chars``: message length limit, characters, marker and fences included.
    ``edit_interval_s``: minimum seconds between two writes of one message.
    ``writing_marker``: appended while streaming, gone in the final edit.
    ``placeholder``: posted by ``start()`` before the first delta (None: post nothing).
    ``status_text``: shown by ``start()`` through ``sink.status`` (None: not used).
    ``render``: applied to every text before it is sent (e.g.
    :func:`core.streaming.chunking.slack_markdown`); a rendering longer than ``max_chars``
    is replaced by the unrendered text.
    ``max_rate_limit_retries``: 429s in a row on one message before it is given up.
    ``empty_text``: shown when the answer is empty.
    ``busy_hold_s``: how long a reply started with the edit budget spent holds its first
    message back for the whole answer (seconds; 0: never held).
    ``status_refresh_s``: the status is shown again this often while nothing of the reply
    is on screen yet, i.e. while the model thinks (None: shown once; Slack drops a status
    after two minutes, so its adapter refreshes it).
    Raises ``ValueError`` for limits the splitter cannot meet.
    """

    max_chars: int
    edit_interval_s: float = 1.0
    writing_marker: str = DEFAULT_WRITING_MARKER
    placeholder: str | None = DEFAULT_PLACEHOLDER
    status_text: str | None = DEFAULT_STATUS
    render: Callable[[str], str] | None = None
    max_rate_limit_retries: int = 5
    empty_text: str = "(no answer)"
    busy_hold_s: float = 15.0
    status_refresh_s: float | None = None

    def __post_init__(self) -> None:
        reserve = self.reserve
        if reserve > self.max_chars // 2 or self.max_chars - reserve < 32:
            raise ValueError(f"max_chars={self.max_chars} too small for the writing marker")
        if self.edit_interval_s <= 0:
            raise ValueError(f"edit_interval_s must be > 0, not {self.edit_interval_s}")
        if self.max_rate_limit_retries < 0:
            raise ValueError("max_rate_limit_retries must be >= 0")
        if self.busy_hold_s < 0:
            raise ValueError(f"busy_hold_s must be >= 0, not {self.busy_hold_s}")
        if self.status_refresh_s is not None and self.status_refresh_s <= 0:
            raise ValueError(f"status_refresh_s must be > 0, not {self.status_refresh_s}")
        for name, value in (("placeholder", self.placeholder), ("empty_text", self.empty_text)):
            if value is not None and not 0 < len(value.strip()) <= len(value) <= self.max_chars:
                raise ValueError(f"{name} must be non-blank and at most max_chars long")

    @property
    def reserve(self) -> int:
        """Characters kept free in every message for the marker and its line break."""
        return len(self.writing_marker) + 1 if self.writing_marker else 0


@dataclass(frozen=True, slots=True)
class PostedMessage:
    """One message of a reply: ``text`` is the last text the platform accepted.

    ``text`` shows ``reply_text[start:end]`` (plus fence lines); ``edits`` counts successful
    edits (the post not included); ``complete`` is False if the message was given up
    (``EditFailed`` or too many 429s) and may still show the writing marker.
    """

    handle: str
    text: str
    start: int
    end: int
    edits: int
    complete: bool


@dataclass(frozen=True, slots=True)
class ReplyResult:
    """What a reply posted. ``text`` is all the text fed (with an error note, if any);
    ``rate_limited`` counts the 429s the sink raised; ``error`` is the stream error that
    ended the reply early (see :func:`stream_reply`)."""

    text: str
    messages: tuple[PostedMessage, ...]
    rate_limited: int
    error: SelfMindError | None = None

    @property
    def handles(self) -> list[str]:
        """Message handles, in thread order."""
        return [message.handle for message in self.messages]

    @property
    def edit_counts(self) -> list[int]:
        """Successful edits per message, in thread order."""
        return [message.edits for message in self.messages]


@dataclass(slots=True)
class _Message:
    start: Position
    prefix: str  # reopened code fence, or ""
    shown_end: int  # the text offset the shown text reaches
    handle: str | None = None
    shown: str | None = None
    end: int | None = None  # set when the message is closed or given up
    edits: int = 0
    last_write_at: float | None = None
    edit_ready: bool = False  # the interval has passed and a limiter token is held
    busy_until: float | None = None  # an interim edit found no token: next try not before
    rate_limited_streak: int = 0
    complete: bool = True
    final: bool = False  # its last write was the final one (``FinishingSink``)


@dataclass(slots=True)
class _Text:
    parts: list[str] = field(default_factory=list)

    def append(self, delta: str) -> None:
        self.parts.append(delta)

    def value(self) -> str:
        if len(self.parts) > 1:
            self.parts[:] = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""


class StreamedReply:
    """One reply streamed into one or more messages through ``sink``.

    Call ``start()`` (optional, first), ``feed(delta)`` for each text delta, then ``finish()``
    or ``fail(note)``, which wait for the final edit and return a :class:`ReplyResult`; call
    ``aclose()`` in a ``finally`` to stop the background task if anything went wrong (it makes
    no further sink calls). ``feed``/``finish``/``fail`` raise the sink's platform error if the
    background task died of one, and ``RuntimeError`` when called after ``finish``/``fail``.
    ``limiter`` is the shared budget for this reply's scope (``EditBudgets.for_scope``).
    ``take_over``: the handle of a message that already shows the start of this reply's text
    (its first ``shows`` characters, e.g. a native stream the platform ended): it is edited
    into the reply's first message instead of a new one being posted; if it cannot be edited
    (``EditFailed``), it stays as it is and the text continues after ``shows`` in a new
    message.
    """

    def __init__(
        self,
        sink: ReplySink,
        config: StreamConfig,
        *,
        limiter: EditLimiter | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        take_over: str | None = None,
        shows: int = 0,
    ) -> None:
        self._sink = sink
        self._finishing_sink = cast(FinishingSink, sink) if _finishes(type(sink)) else None
        self._config = config
        self._limiter = limiter
        self._clock = clock
        self._sleep = sleep if sleep is not None else asyncio.sleep
        self._text = _Text()
        first = _Message(START, "", shown_end=shows if take_over else 0, handle=take_over)
        self._messages = [first]
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._began = False
        self._finishing = False
        self._closed = False
        self._want_placeholder = False
        self._held_until: float | None = None  # held (see the module docstring) until then
        self._reserved = False  # this reply's final edit is reserved in the budget
        self._status_shown = False
        self._rate_limited = 0
        self._error: SelfMindError | None = None

    @property
    def text(self) -> str:
        """All the text fed so far."""
        return self._text.value()

    async def start(self) -> None:
        """Show the status indicator and post the placeholder. Only before any ``feed``."""
        if self._began or self._closed:
            raise RuntimeError("start() must be the first call on a StreamedReply")
        self._began = True
        if self._config.status_text is not None:
            await self._set_status(self._config.status_text)
        limiter, hold = self._limiter, self._config.busy_hold_s
        if limiter is not None and hold > 0:
            if limiter.reserve():
                self._reserved = True
            else:
                self._held_until = self._now() + hold
                logger.debug("edit budget spent: the reply is held for %s s", hold)
        self._want_placeholder = self._config.placeholder is not None and self._held_until is None
        self._wake_task()

    async def feed(self, delta: str) -> None:
        """Append ``delta`` to the reply; returns at once (edits happen in the background)."""
        self._check_open()
        self._began = True
        if delta:
            self._text.append(delta)
            self._wake_task()

    async def finish(self) -> ReplyResult:
        """Make the final edits (exact text, no marker) and return what was posted."""
        self._check_open()
        self._began = self._finishing = True
        task = self._wake_task()
        try:
            await task
        finally:
            self._release()
        self._closed = True
        if self._status_shown:
            self._status_shown = False  # one clear, also when it fails: none again on error
            await self._set_status(None)
        result = self._result()
        logger.info(
            "reply finished: messages=%d edits=%d chars=%d rate_limited=%d",
            len(result.messages),
            sum(result.edit_counts),
            len(result.text),
            result.rate_limited,
        )
        return result

    async def fail(self, note: str, *, error: SelfMindError | None = None) -> ReplyResult:
        """End the reply early: the text so far, then a visible ``note``; like ``finish()``.

        An open code block is closed first so that the note shows as text. ``error`` is
        recorded in the result.
        """
        self._check_open()
        text = self._text.value()
        fence = fence_at_end(text, self._messages[-1].start)
        tail = closing_suffix(
            fence, after_newline=text.endswith("\n"), max_chars=self._config.max_chars
        )
        separator = "\n\n" if text.strip() else ""
        self._text.append(f"{tail}{separator}⚠️ {note}")
        self._error = error
        return await self.finish()

    async def clear_status(self) -> None:
        """Take down the status indicator if this reply showed it and ``finish`` did not:
        the error path, after a platform error ended the reply. Never raises."""
        if self._status_shown:
            self._status_shown = False
            await clear_status_quietly(self._sink)

    async def refresh_status(self) -> None:
        """Show the status again if this reply shows it and nothing else yet (no message
        posted: the model is still thinking)."""
        text = self._config.status_text
        if self._status_shown and text is not None and self._messages[0].handle is None:
            await self._set_status(text)

    async def aclose(self) -> None:
        """Stop the background task without further sink calls; safe to call twice."""
        self._closed = True
        self._release()
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
            await asyncio.wait({task})  # the caller's own cancellation still propagates
        if not task.cancelled():
            task.exception()  # retrieved: the caller saw it through feed/finish, or gave up

    # --- internals

    def _check_open(self) -> None:
        if self._finishing or self._closed:
            raise RuntimeError("this reply is already finished or closed")
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error

    def _wake_task(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="selfmind-streamed-reply"
            )
        self._wake.set()
        return self._task

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return asyncio.get_running_loop().time()

    async def _set_status(self, text: str | None) -> None:
        try:
            await self._sink.status(text=text)
        except RateLimited as exc:  # the indicator is cosmetic: skip it
            logger.info("status indicator rate-limited (retry after %s s)", exc.retry_after_s)
            return
        self._status_shown = text is not None

    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            if await self._step():
                continue
            if self._finishing:
                return
            held = self._held_left()
            if held is None:
                await self._wake.wait()
            elif held <= 0:
                self._held_until = None  # the hold is over: the next step posts
            else:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancel that comes just as the event is set (aclose would then wait forever).
                try:
                    async with asyncio.timeout(held):
                        await self._wake.wait()
                except TimeoutError:
                    self._held_until = None  # the hold is over: the next step posts

    def _held_left(self) -> float | None:
        """Seconds the first message is still held back: None when it is not (not held,
        finishing, or rolled over), 0 when the hold has just ended."""
        if self._held_until is None or self._finishing or len(self._messages) > 1:
            return None
        return max(0.0, self._held_until - self._now())

    def _release(self) -> None:
        """End this reply's reservation in the budget, once."""
        if self._reserved and self._limiter is not None:
            self._limiter.release()
        self._reserved = False

    async def _step(self) -> bool:
        """Make (or wait for) one sink call; False when there is nothing to do."""
        config = self._config
        text = self._text.value()
        message = self._messages[-1]
        split = split_message(text, message.start, config.max_chars, reserve=config.reserve)
        if split is not None:
            closed = self._render(
                message.prefix + text[message.start.pos : split.cut.pos] + split.suffix
            )
            if message.handle is None:
                await self._post(message, closed, split.cut.pos)
            elif message.shown != closed:
                await self._edit(message, closed, split.cut.pos)
            else:
                message.end = split.cut.pos
                prefix = reopen_prefix(split.cut.fence, config.max_chars)
                self._messages.append(_Message(split.cut, prefix, shown_end=split.cut.pos))
                logger.debug("reply rolled over at %d chars", split.cut.pos)
            return True
        blank = not text[message.start.pos :].strip()
        final = self._finishing  # no roll-over left: this write shows the final text
        if message.handle is None:
            if not blank or (self._finishing and len(self._messages) == 1):
                if self._held_left():
                    return False  # posted whole when it finishes (or when the hold ends)
                await self._post(message, *self._display(message, text), final=final)
            elif self._want_placeholder and config.placeholder is not None:
                self._want_placeholder = False  # only ever the first message, once
                await self._post(message, self._render(config.placeholder), message.start.pos)
            else:
                return await self._seal()  # a blank tail after a roll-over is not posted
            return True
        if blank and not self._finishing:
            return False  # keep the placeholder
        target, end = self._display(message, text)
        if target == message.shown:
            return await self._seal()
        await self._edit(message, target, end, final=final)
        return True

    async def _seal(self) -> bool:
        """When finishing with every text shown: give the last message shown its final
        write (``FinishingSink``) if its last write was not one (its text already final,
        e.g. with no writing marker, or a blank tail left after a roll-over). False when
        there is nothing to do."""
        if not self._finishing or self._finishing_sink is None:
            return False
        shown = [m for m in self._messages if m.handle is not None]
        if not shown or shown[-1].final or not shown[-1].complete or shown[-1].shown is None:
            return False
        last = shown[-1]
        assert last.shown is not None
        await self._edit(last, last.shown, last.shown_end, final=True)
        return True

    def _display(self, message: _Message, text: str) -> tuple[str, int]:
        """The message's text now, and the offset of the reply text it reaches."""
        body = text[message.start.pos :]
        if self._finishing:
            if not body.strip() and len(self._messages) == 1:
                return self._render(self._config.empty_text), message.start.pos
            return self._render(message.prefix + body), len(text)
        marker = self._config.writing_marker
        fence = fence_at_end(text, message.start)
        close = closing_suffix(
            fence,
            after_newline=(message.prefix + body).endswith("\n"),
            max_chars=self._config.max_chars,
        )
        separator = "\n" if close and marker and not marker.startswith("\n") else ""
        return self._render(message.prefix + body + close + separator + marker), len(text)

    def _render(self, text: str) -> str:
        render = self._config.render
        if render is None:
            return text
        rendered = render(text)
        return rendered if len(rendered) <= self._config.max_chars else text

    async def _post(self, message: _Message, text: str, end: int, *, final: bool = False) -> None:
        try:
            if final and self._finishing_sink is not None:
                handle = await self._finishing_sink.post_final(text=text)
            else:
                handle = await self._sink.post(text=text)
        except RateLimited as exc:
            self._count_rate_limit(message, exc, "post")
            if message.rate_limited_streak > self._config.max_rate_limit_retries:
                raise
            await self._sleep(max(0.0, exc.retry_after_s))
            return  # the next step posts the newest text
        self._wrote(message, text, end)
        message.handle = handle
        message.final = final
        logger.debug("reply message posted: handle=%s chars=%d", handle, len(text))

    async def _edit(self, message: _Message, text: str, end: int, *, final: bool = False) -> None:
        if not message.edit_ready:
            message.edit_ready = await self._wait_turn(message, final=final)
            return  # the next step edits with the text that arrived meanwhile
        message.edit_ready = False
        assert message.handle is not None
        try:
            if final and self._finishing_sink is not None:
                await self._finishing_sink.edit_final(handle=message.handle, text=text)
            else:
                await self._sink.edit(handle=message.handle, text=text)
        except RateLimited as exc:
            self._count_rate_limit(message, exc, "edit")
            if message.rate_limited_streak > self._config.max_rate_limit_retries:
                self._give_up(message, "rate limited")
            else:
                await self._sleep(max(0.0, exc.retry_after_s))
            return
        except EditFailed as exc:
            self._give_up(message, exc.reason)
            return
        self._wrote(message, text, end)
        message.edits += 1
        message.final = final

    async def _wait_turn(self, message: _Message, *, final: bool) -> bool:
        """Wait out the edit interval, then take a budget token: a final edit waits for one;
        an interim edit takes one only if it is free now. False: no token, this edit is
        skipped (its text goes into a later write, tried again an interval later)."""
        due = [t for t in (message.last_write_at, message.busy_until) if t is not None]
        if due:
            delay = max(due) + self._config.edit_interval_s - self._now()
            if delay > 0:
                await self._sleep(delay)
        limiter = self._limiter
        if limiter is None:
            return True
        if final or self._finishing:
            self._release()  # the reservation ends: the final edit takes its token now
            await limiter.acquire()
            return True
        if not limiter.has_capacity():
            message.busy_until = self._now()
            return False
        await limiter.acquire()
        return True

    def _wrote(self, message: _Message, text: str, end: int) -> None:
        message.shown = text
        message.shown_end = end
        message.last_write_at = self._now()
        message.rate_limited_streak = 0

    def _count_rate_limit(self, message: _Message, exc: RateLimited, call: str) -> None:
        self._rate_limited += 1
        message.rate_limited_streak += 1
        logger.info(
            "reply %s rate-limited (%d in a row), retry after %s s",
            call,
            message.rate_limited_streak,
            exc.retry_after_s,
        )

    def _give_up(self, message: _Message, reason: str) -> None:
        """Leave ``message`` as last shown; the rest of the text goes to a new message."""
        logger.warning(
            "reply edit failed for good (%s): the rest goes to a new message (handle=%s)",
            reason,
            message.handle,
        )
        message.complete = False
        message.end = message.shown_end
        start = locate(self._text.value(), message.start, message.shown_end)
        prefix = reopen_prefix(start.fence, self._config.max_chars)
        self._messages.append(_Message(start, prefix, shown_end=start.pos))

    def _result(self) -> ReplyResult:
        posted = tuple(
            PostedMessage(
                handle=message.handle,
                text=message.shown or "",
                start=message.start.pos,
                end=message.end if message.end is not None else message.shown_end,
                edits=message.edits,
                complete=message.complete,
            )
            for message in self._messages
            if message.handle is not None
        )
        return ReplyResult(self._text.value(), posted, self._rate_limited, self._error)


class Reply(Protocol):
    """What :func:`stream_reply` drives: :class:`StreamedReply` (edits) or
    :class:`core.streaming.native.NativeReply` (the platform's streaming methods)."""

    @property
    def text(self) -> str: ...

    async def start(self) -> None: ...

    async def feed(self, delta: str) -> None: ...

    async def finish(self) -> ReplyResult: ...

    async def fail(self, note: str, *, error: SelfMindError | None = None) -> ReplyResult: ...

    async def clear_status(self) -> None: ...

    async def refresh_status(self) -> None: ...

    async def aclose(self) -> None: ...


async def clear_status_quietly(sink: ReplySink) -> None:
    """Clear ``sink``'s status indicator on an error path: a failure is logged (INFO, its
    type only) and not raised, so the error that ended the reply is the one the caller sees.
    Slack itself drops a status after two minutes without a reply ("assistant.threads.
    setStatus", docs.slack.dev)."""
    try:
        await sink.status(text=None)
    except Exception as exc:  # cosmetic, and the caller is already raising another error
        logger.info("status indicator not cleared: %s", type(exc).__name__)


async def stream_reply(
    sink: ReplySink,
    deltas: AsyncIterable[str],
    config: StreamConfig,
    *,
    limiter: EditLimiter | None = None,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    reply: Reply | None = None,
) -> ReplyResult:
    """Stream ``deltas`` (an answer's text deltas) into ``sink`` and return what was posted.

    If iterating ``deltas`` raises a ``SelfMindError`` (e.g. ``ModelError``), the text so far
    stays and a visible note follows it (``ModelError.user_message``, else ``str(error)``);
    the error is *returned* in ``ReplyResult.error``, not raised, so the caller can tell a
    partial answer from a whole one. For ``StreamCutError`` the text in ``partial`` that was
    not yet fed is shown first. Any other exception from ``deltas`` gets a generic note and is
    re-raised (a bug: let the adapter edge log it). Sink platform errors are raised as they
    are, after the status indicator the reply showed is cleared (a cancelled call makes no
    further sink calls). ``deltas`` is closed (``aclose()``) if it has that method; no task
    outlives the call, also when it is cancelled. ``reply``: drive this reply (over ``sink``)
    instead of a new :class:`StreamedReply`, e.g. a :class:`core.streaming.native.NativeReply`.
    """
    if reply is None:
        reply = StreamedReply(sink, config, limiter=limiter, clock=clock, sleep=sleep)
    iterator = aiter(deltas)
    keeper: asyncio.Task[None] | None = None
    try:
        await reply.start()
        if config.status_refresh_s is not None:
            keeper = asyncio.create_task(
                _keep_status(reply, config.status_refresh_s), name="selfmind-status-refresh"
            )
        while True:
            try:
                delta = await anext(iterator)
            except StopAsyncIteration:
                break
            except SelfMindError as exc:
                await _stop(keeper)
                return await _fail_with(reply, exc)
            except Exception:
                await _stop(keeper)
                await reply.fail(GENERIC_ERROR_NOTE)
                raise
            if keeper is not None and delta:
                await _stop(keeper)  # the first token: the answer shows from now on
                keeper = None
            await reply.feed(delta)
        await _stop(keeper)
        return await reply.finish()
    except Exception:
        await reply.clear_status()  # e.g. the post failed: "is thinking…" must not stay up
        raise
    finally:
        await _stop(keeper)
        await reply.aclose()
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


async def _keep_status(reply: Reply, every_s: float) -> None:
    """Show ``reply``'s status again every ``every_s`` seconds until cancelled (the model's
    first token); a failure ends the refreshing, logged (INFO, its type only)."""
    try:
        while True:
            await asyncio.sleep(every_s)
            await reply.refresh_status()
    except Exception as exc:  # cosmetic: the answer goes on without the indicator
        logger.info("status indicator not refreshed: %s", type(exc).__name__)


async def _stop(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait for it."""
    if task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task})


async def _fail_with(reply: Reply, error: SelfMindError) -> ReplyResult:
    logger.info("answer stream failed mid-reply: %s", type(error).__name__)
    if isinstance(error, StreamCutError):
        fed = reply.text
        if error.partial.startswith(fed) and len(error.partial) > len(fed):
            await reply.feed(error.partial[len(fed) :])
    note = error.user_message if isinstance(error, ModelError) else str(error)
    return await reply.fail(note, error=error)
