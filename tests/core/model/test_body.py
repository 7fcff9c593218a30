"""The streamed request body: the very bytes ``messages.create`` sends, sent again whole on a
retry, with a ``Content-Length``, and the file bytes let go once the response has begun."""

from __future__ import annotations

import base64
import gc
import re
import weakref
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from core.model.body import CHUNK_BYTES, FileMarkers, RequestBody, base64_size
from core.model.claude import ChatMessage, ClaudeChatModel, FileBlock, SystemBlock
from tests.core.model.test_llm import CHAT_MODEL as MODEL
from tests.core.model.test_llm import make_model
from tests.fakes.anthropic_server import (
    FakeAnthropic,
    Reply,
    overloaded,
    running_fake_anthropic,
)
from tests.files_helpers import pdf, png

API_KEY = "sk-ant-test-body"


class Tracked(bytearray):
    """File bytes that can be watched with a weak reference."""


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


def chat_model(fake: FakeAnthropic, *, max_retries: int = 0) -> ClaudeChatModel:
    return make_model(fake.base_url, max_tokens=2000, max_retries=max_retries)


def files() -> tuple[FileBlock, ...]:
    # A PDF larger than several encoding chunks, an odd length (base64 padding), and text
    # that JSON escapes (quotes, a backslash, a newline, non-ASCII).
    doc = pdf(3, pad_bytes=3 * CHUNK_BYTES + 1)
    return (
        FileBlock("image", "shot.png", "image/png", png(40, 30)),
        FileBlock("pdf", "report.pdf", "application/pdf", Tracked(doc)),
        FileBlock("text", "app.log", "text/plain", 'ERROR "boot" C:\\tmp\ncafé ☕\n'),
    )


def old_params(blocks: tuple[FileBlock, ...]) -> list[Any]:
    """The messages as the code sent them before the body was streamed: base64 text
    inside the params, through ``messages.create``."""
    content: list[Any] = []
    for block in blocks:
        if isinstance(block.data, str):
            source = {"type": "text", "media_type": "text/plain", "data": block.data}
            content.append({"type": "document", "source": source, "title": block.name})
            continue
        data = base64.b64encode(block.data).decode()
        if block.kind == "image":
            content.append({"type": "text", "text": f"[image: {block.name}]"})
            source = {"type": "base64", "media_type": block.media_type, "data": data}
            content.append({"type": "image", "source": source})
        else:
            source = {"type": "base64", "media_type": "application/pdf", "data": data}
            content.append({"type": "document", "source": source, "title": block.name})
    content.append({"type": "text", "text": "Read these"})
    return [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": content},
    ]


def messages(blocks: tuple[FileBlock, ...]) -> list[ChatMessage]:
    return [
        ChatMessage("user", "earlier"),
        ChatMessage("assistant", "ok"),
        ChatMessage("user", "Read these", files=blocks),
    ]


SYSTEM = (SystemBlock("You are SelfMind.", cache=True), SystemBlock("Memories: none."))


async def test_the_streamed_body_is_the_body_messages_create_sends(
    claude: FakeAnthropic,
) -> None:
    blocks = files()
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=claude.base_url, max_retries=0)
    async with client:
        raw = await client.messages.with_raw_response.create(
            max_tokens=2000,
            messages=old_params(blocks),
            model=MODEL,
            stream=True,
            system=[
                {
                    "type": "text",
                    "text": "You are SelfMind.",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "Memories: none."},
            ],
            thinking={"type": "adaptive"},
        )
        async for _ in await raw.parse():
            pass
    async with chat_model(claude) as model:
        answer = "".join([d async for d in model.stream(system=SYSTEM, messages=messages(blocks))])
    assert answer
    before, after = claude.requests_of("chat")
    assert (after.status, before.status) == (200, 200)
    assert after.size == before.size and after.sha256 == before.sha256  # byte for byte
    assert after.body == before.body
    assert after.headers["content-length"] == str(after.size)  # not chunked
    assert "transfer-encoding" not in after.headers


async def test_a_retried_request_sends_the_whole_body_again(claude: FakeAnthropic) -> None:
    claude.enqueue(overloaded(retry_after_s=0.01))
    claude.enqueue(Reply(text="read"))
    async with chat_model(claude, max_retries=1) as model:
        answer = "".join([d async for d in model.stream(system=SYSTEM, messages=messages(files()))])
    assert answer == "read"
    first, second = claude.requests_of("chat")
    assert (first.status, second.status) == (529, 200)
    assert second.sha256 == first.sha256 and second.size == first.size > 3 * CHUNK_BYTES


async def test_the_file_bytes_are_let_go_once_the_answer_streams(claude: FakeAnthropic) -> None:
    claude.enqueue(Reply(text="a long answer " * 50))
    claude.chunk_size = 10

    def start(model: ClaudeChatModel) -> tuple[Any, weakref.ref[Tracked]]:
        blocks = files()
        data = blocks[1].data
        assert isinstance(data, Tracked)
        return model.stream(system=SYSTEM, messages=messages(blocks)), weakref.ref(data)

    async with chat_model(claude) as model:
        stream, watched = start(model)
        assert watched() is not None  # held until the request is sent
        first = await anext(aiter(stream))
        gc.collect()
        assert first and watched() is None  # the answer streams on without the file
        rest = "".join([d async for d in stream])
    assert (first + rest).startswith("a long answer")


async def test_a_body_is_reiterable_until_released() -> None:
    markers = FileMarkers()
    data = bytes(range(256)) * 3000
    body = RequestBody({"a": [markers.marker(data)], "b": "é"}, markers)
    expected = ('{"a":["' + base64.b64encode(data).decode() + '"],"b":"é"}').encode()
    for _ in range(2):
        assert b"".join([c async for c in body]) == expected
    assert body.length == len(expected) and body.whole() == expected
    body.release()
    with pytest.raises(RuntimeError):
        [c async for c in body]


async def test_the_debug_log_gives_each_files_base64_size_never_its_bytes(
    claude: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    blocks = files()
    sizes = sorted(
        len(b.data) if isinstance(b.data, str) else base64_size(len(b.data)) for b in blocks
    )
    with caplog.at_level("DEBUG", logger="core.model.claude"):
        async with chat_model(claude) as model:
            assert "".join(
                [d async for d in model.stream(system=SYSTEM, messages=messages(blocks))]
            )
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("chat request")]
    assert sorted(int(n) for n in re.findall(r"<(\d+) chars>", line)) == sizes
    assert "selfmind-file-" not in line  # the marker, not a size, was logged before
    markers = FileMarkers()
    assert markers.base64_chars(markers.marker(b"12345")) == 8
    assert markers.base64_chars("selfmind-file-x-0") is None
