"""core.streaming.native.NativeReply over an in-memory native sink: roll-over with code
fences, 429s on appends waited out, refusal mid-answer continued by edits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from core.errors import EditFailed, RateLimited, StreamingRefused
from core.streaming.native import NativeReply
from core.streaming.reply import StreamConfig, stream_reply

CONFIG = StreamConfig(max_chars=400, edit_interval_s=0.01, placeholder=None, status_text=None)


@dataclass
class Stream:
    sink: Sink
    text: str = ""
    buffer: str = ""
    handle: str | None = None

    @property
    def started(self) -> bool:
        return self.handle is not None

    async def append(self, *, text: str, flush: bool = False) -> bool:
        if len(self.text) + len(self.buffer) + len(text) > self.sink.max_chars - 8:  # room: fence
            raise EditFailed("msg_too_long")
        self.buffer += text
        if not (flush or len(self.buffer) >= 16):
            return False
        await self._flush()
        return True

    async def stop(self, *, final: bool, text: str = "") -> str:
        self.buffer += text
        await self._flush()
        assert self.handle is not None
        self.sink.stopped.append(self.handle)
        return self.handle

    async def abandon(self) -> None:
        assert self.handle is not None
        self.sink.abandoned.append(self.handle)

    async def _flush(self) -> None:
        self.sink.calls += 1
        if self.sink.refuse_after is not None and self.sink.calls > self.sink.refuse_after:
            raise StreamingRefused("unknown_method")
        if self.sink.rate_limits:
            self.sink.rate_limits -= 1
            raise RateLimited(0.01)
        if self.handle is None:
            self.handle = f"s{len(self.sink.messages) + 1}"
            self.sink.messages[self.handle] = ""
        self.text += self.buffer
        self.sink.messages[self.handle] = self.text
        self.buffer = ""


@dataclass
class Sink:
    max_chars: int = 200
    refuse_after: int | None = None
    rate_limits: int = 0
    calls: int = 0
    messages: dict[str, str] = field(default_factory=dict)
    stopped: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    frozen: set[str] = field(default_factory=set)  # edits refused (a stream still live)

    def open_stream(self) -> Stream:
        return Stream(self)

    async def post(self, *, text: str) -> str:
        handle = f"p{len(self.messages) + 1}"
        self.messages[handle] = text
        return handle

    async def edit(self, *, handle: str, text: str) -> None:
        if handle in self.frozen:
            raise EditFailed("cant_update_message")
        self.messages[handle] = text

    async def status(self, *, text: str | None) -> None:
        return None


async def feed_all(reply: NativeReply, text: str, size: int = 7) -> None:
    for i in range(0, len(text), size):
        await reply.feed(text[i : i + size])


async def test_roll_over_closes_and_reopens_a_code_block() -> None:
    sink = Sink()
    text = "Intro line.\n\n```python\n" + "".join(f"x_{i} = {i}\n" for i in range(40)) + "```\nEnd."
    reply = NativeReply(sink, CONFIG)
    await feed_all(reply, text)
    result = await reply.finish()
    shown = [sink.messages[m.handle] for m in result.messages]
    assert len(shown) >= 2 and all(len(s) <= sink.max_chars for s in shown)
    assert shown[0].endswith("\n```") and shown[1].startswith("```python\n")
    pieces = [
        (m.removeprefix("```python\n") if i and shown[i - 1].endswith("\n```") else m)
        for i, m in enumerate(shown)
    ]
    pieces = [
        p.removesuffix("\n```") if i < len(shown) - 1 and p.endswith("\n```") else p
        for i, p in enumerate(pieces)
    ]
    assert "".join(pieces) == text
    assert sink.stopped == [m.handle for m in result.messages]
    assert result.text == text


async def test_429s_on_appends_are_waited_out_and_nothing_is_lost() -> None:
    sink = Sink(max_chars=10_000)
    reply = NativeReply(sink, CONFIG)
    text = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu."
    await reply.feed(text[:5])  # starts the stream
    sink.rate_limits = 2
    await feed_all(reply, text[5:])
    result = await reply.finish()
    assert [sink.messages[m.handle] for m in result.messages] == [text]
    assert result.rate_limited == 2


@pytest.mark.parametrize("length", [300, 1000])
async def test_a_stream_refused_mid_answer_is_finished_in_place_by_edits(length: int) -> None:
    """A stream the platform ends (Slack: ``message_not_in_streaming_state``) is edited into
    the whole text so far; a new message follows only past the edit limit (400 here)."""
    sink = Sink(max_chars=10_000, refuse_after=3)
    reply = NativeReply(sink, CONFIG)
    text = "".join(f"Sentence number {i} of the answer. " for i in range(60))[:length]
    await feed_all(reply, text)
    result = await reply.finish()
    assert reply.fell_back
    assert result.handles[0] == "s1"  # the streamed message, taken over
    assert "".join(sink.messages[h] for h in result.handles) == text
    assert len(result.handles) == (1 if length <= CONFIG.max_chars else 3)
    assert all(len(sink.messages[h]) <= CONFIG.max_chars for h in result.handles)
    assert sink.abandoned == ["s1"]  # ended as it shows, not left open
    assert sink.stopped == []


async def test_a_stream_that_cannot_be_edited_keeps_its_text_and_the_rest_follows() -> None:
    sink = Sink(max_chars=10_000, refuse_after=3, frozen={"s1"})
    reply = NativeReply(sink, CONFIG)
    text = "".join(f"Sentence number {i} of the answer. " for i in range(10))
    await feed_all(reply, text)
    result = await reply.finish()
    first, *rest = result.messages
    assert first.handle == "s1" and not first.complete and rest  # left as the stream shows it
    assert "".join(sink.messages[h] for h in result.handles) == text  # nothing lost or repeated


async def test_a_429_on_the_first_append_falls_back_with_no_stream_to_end() -> None:
    sink = Sink(max_chars=10_000, rate_limits=1)
    reply = NativeReply(sink, CONFIG)
    await feed_all(reply, "Short answer, shown by edits.")
    result = await reply.finish()
    assert reply.fell_back and sink.abandoned == [] and sink.stopped == []
    assert "".join(sink.messages[m.handle] for m in result.messages) == result.text


async def test_a_refused_last_stop_with_everything_shown_posts_nothing_more() -> None:
    sink = Sink(max_chars=10_000, refuse_after=2)
    reply = NativeReply(sink, CONFIG)
    await reply.feed("Sixteen chars!!!")  # opens the stream (call 1)
    await reply.feed("Another sixteen.")  # flushed (call 2): the whole text is shown
    result = await reply.finish()  # the stop (call 3) is refused
    assert reply.fell_back
    assert sink.messages == {"s1": "Sixteen chars!!!Another sixteen."}  # no "(no answer)"
    assert sink.abandoned == ["s1"]
    assert result.text == "Sixteen chars!!!Another sixteen."


async def test_a_failed_status_clear_is_sent_once_and_a_429_on_it_is_not_an_error() -> None:
    class StatusSink(Sink):
        def __init__(self, fail_with: Exception) -> None:
            super().__init__(max_chars=10_000)
            self.fail_with = fail_with
            self.statuses: list[str | None] = []

        async def status(self, *, text: str | None) -> None:
            self.statuses.append(text)
            if text is None:
                raise self.fail_with

    config = StreamConfig(max_chars=10_000, edit_interval_s=0.01, placeholder=None)
    limited = StatusSink(RateLimited(30.0))
    result = await stream_reply(limited, deltas("The whole answer."), config, reply=NativeReply(
        limited, config))  # fmt: skip
    assert result.text == "The whole answer." and limited.statuses == ["is thinking…", None]
    broken = StatusSink(ConnectionResetError("reset"))
    with pytest.raises(ConnectionResetError):
        await stream_reply(broken, deltas("Shown."), config, reply=NativeReply(broken, config))
    assert broken.statuses == ["is thinking…", None]  # not a second clear on the error path


async def deltas(text: str, size: int = 5) -> AsyncIterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]
