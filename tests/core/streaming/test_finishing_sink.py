"""A finished answer's last message gets its final write through a FinishingSink (Slack puts
its feedback buttons there), whatever path the reply took: one message, a roll-over, a final
edit refused, no writing marker, a blank tail after a roll-over. In virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from core.errors import EditFailed
from core.streaming.reply import FinishingSink, ReplyResult, StreamConfig, stream_reply
from tests.fakes.virtual_time import run_virtual


@dataclass
class RecordingSink:
    """A FinishingSink that records ``(kind, handle, text)``; ``refuse_final_edit`` makes the
    first ``edit_final`` fail for good (``EditFailed``)."""

    max_chars: int
    refuse_final_edit: bool = False
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)

    async def post(self, *, text: str) -> str:
        return self._post("post", text)

    async def post_final(self, *, text: str) -> str:
        return self._post("post_final", text)

    async def edit(self, *, handle: str, text: str) -> None:
        self._edit("edit", handle, text)

    async def edit_final(self, *, handle: str, text: str) -> None:
        if self.refuse_final_edit:
            self.refuse_final_edit = False
            raise EditFailed("msg_too_long")
        self._edit("edit_final", handle, text)

    async def status(self, *, text: str | None) -> None:
        return None

    def _post(self, kind: str, text: str) -> str:
        assert 0 < len(text) <= self.max_chars
        handle = f"m{len(self.texts) + 1}"
        self.texts[handle] = text
        self.calls.append((kind, handle, text))
        return handle

    def _edit(self, kind: str, handle: str, text: str) -> None:
        assert handle in self.texts and 0 < len(text) <= self.max_chars
        self.texts[handle] = text
        self.calls.append((kind, handle, text))

    def final_handles(self) -> list[str]:
        """Messages whose last write was a final one."""
        last: dict[str, str] = {}
        for kind, handle, _ in self.calls:
            last[handle] = kind
        return [h for h, kind in last.items() if kind.endswith("_final")]


async def deltas(text: str, size: int = 40) -> AsyncIterator[str]:
    """``text`` in pieces of ``size``, 0.3 simulated seconds apart (several edits)."""
    for i in range(0, len(text), size):
        if i:
            await asyncio.sleep(0.3)
        yield text[i : i + size]


def run(
    sink: RecordingSink, text: str, config: StreamConfig, *, thinking_s: float = 0.0
) -> ReplyResult:
    async def answer() -> AsyncIterator[str]:
        await asyncio.sleep(thinking_s)
        async for delta in deltas(text):
            yield delta

    async def main() -> ReplyResult:
        return await stream_reply(sink, answer(), config)

    return run_virtual(main())


def test_the_recording_sink_is_a_finishing_sink() -> None:
    assert isinstance(RecordingSink(max_chars=100), FinishingSink)


def test_one_message_ends_with_a_final_write_holding_the_text() -> None:
    sink = RecordingSink(max_chars=500)
    text = "A short answer, streamed in a few deltas. " * 3
    result = run(sink, text, StreamConfig(max_chars=500, placeholder=None))
    (handle,) = result.handles
    assert sink.final_handles() == [handle]
    assert sink.calls[-1] == ("edit_final", handle, text)
    assert [kind for kind, _, _ in sink.calls].count("edit_final") == 1


def test_a_rolled_over_reply_has_its_final_write_on_the_last_message_only() -> None:
    sink = RecordingSink(max_chars=300)
    text = " ".join(f"word{i}" for i in range(200))
    result = run(sink, text, StreamConfig(max_chars=300, placeholder=None))
    assert len(result.handles) >= 3
    assert sink.final_handles() == [result.handles[-1]]
    assert "".join(sink.texts[h] for h in result.handles).replace(" ", "") == text.replace(" ", "")


def test_no_writing_marker_still_gets_a_final_write() -> None:
    sink = RecordingSink(max_chars=500)
    text = "An answer whose streamed text is already its final text."
    config = StreamConfig(max_chars=500, placeholder=None, writing_marker="")
    result = run(sink, text, config)
    assert sink.final_handles() == result.handles
    assert sink.texts[result.handles[-1]] == text


def test_a_blank_tail_after_a_roll_over_puts_the_final_write_on_the_message_before() -> None:
    sink = RecordingSink(max_chars=300)
    text = "x" * 250 + "\n\n" + " " * 30  # rolled over at the break, then only blanks
    result = run(sink, text, StreamConfig(max_chars=300, placeholder=None))
    assert sink.final_handles() == [result.handles[-1]]


def test_a_refused_final_edit_moves_the_rest_to_a_new_final_message() -> None:
    sink = RecordingSink(max_chars=500, refuse_final_edit=True)
    text = "Some words that end up in two messages because the last edit failed. " * 2
    result = run(sink, text, StreamConfig(max_chars=500, placeholder=None))
    assert len(result.handles) == 2
    assert sink.final_handles() == [result.handles[-1]]
    assert [kind for kind, _, _ in sink.calls][-1] == "post_final"


def test_the_placeholder_is_never_a_final_write() -> None:
    sink = RecordingSink(max_chars=500)
    result = run(sink, "Hello there.", StreamConfig(max_chars=500), thinking_s=2.0)
    assert sink.calls[0][0] == "post"  # the placeholder
    assert sink.final_handles() == result.handles
    assert sink.texts[result.handles[0]] == "Hello there."
