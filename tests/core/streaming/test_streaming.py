"""Streamed replies over a fake sink, in virtual time.

The tests run on an event loop (``tests/fakes/virtual_time.py``) whose clock jumps to the
next timer whenever nothing is ready, so ``asyncio.sleep``, aiolimiter and the edit throttle
all run on simulated seconds: a 100-second stream takes milliseconds, and timings are exact.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bots.slack_bot.platform import edit_budgets, stream_config
from core.errors import EditFailed, ModelError, RateLimited, StreamCutError
from core.streaming.chunking import START, fence_at_end
from core.streaming.reply import (
    DEFAULT_WRITING_MARKER,
    GENERIC_ERROR_NOTE,
    EditBudgets,
    ReplyResult,
    StreamConfig,
    StreamedReply,
    stream_reply,
)
from tests.fakes.virtual_time import SlackLikeWorkspace, now, run_virtual

MARKER = DEFAULT_WRITING_MARKER
FENCE_OPENING = re.compile(r"(`{3,}|~{3,})[^`\n]*\n")
FENCE_CLOSING = re.compile(r"\n?(`{3,}|~{3,})")


# --- fake sink ------------------------------------------------------------------------------


@dataclass
class Call:
    at: float
    kind: str  # "post", "edit", "status"
    handle: str | None
    text: str | None


@dataclass
class FakeSink:
    """A real ReplySink: records every call with the loop time; hooks inject failures."""

    max_chars: int
    workspace: SlackLikeWorkspace | None = None
    on_edit: Callable[[str, str], None] | None = None  # may raise
    on_post: Callable[[str], None] | None = None
    calls: list[Call] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)

    async def post(self, *, text: str) -> str:
        assert 0 < len(text) <= self.max_chars, len(text)
        if self.on_post is not None:
            self.on_post(text)
        handle = f"m{len(self.texts) + 1}"
        self.texts[handle] = text
        self.calls.append(Call(now(), "post", handle, text))
        return handle

    async def edit(self, *, handle: str, text: str) -> None:
        assert 0 < len(text) <= self.max_chars, len(text)
        assert handle in self.texts
        if self.workspace is not None:
            self.workspace.check_edit()
        if self.on_edit is not None:
            self.on_edit(handle, text)
        self.texts[handle] = text
        self.calls.append(Call(now(), "edit", handle, text))

    async def status(self, *, text: str | None) -> None:
        self.calls.append(Call(now(), "status", None, text))

    def writes(self, handle: str) -> list[Call]:
        return [c for c in self.calls if c.handle == handle and c.kind in ("post", "edit")]

    def edits(self, handle: str) -> list[Call]:
        return [c for c in self.calls if c.handle == handle and c.kind == "edit"]


async def timed_deltas(
    pieces: list[str], *, every_s: float, first_after_s: float = 0.0
) -> AsyncIterator[str]:
    await asyncio.sleep(first_after_s)
    for index, piece in enumerate(pieces):
        if index:
            await asyncio.sleep(every_s)
        yield piece


def tokens_of(text: str, rng: random.Random, *, low: int = 1, high: int = 6) -> list[str]:
    pieces, pos = [], 0
    while pos < len(text):
        size = rng.randint(low, high)
        pieces.append(text[pos : pos + size])
        pos += size
    return pieces


def check_result(result: ReplyResult, sink: FakeSink, answer: str) -> None:
    """The messages hold the answer exactly, fence lines aside, and match the platform."""
    if not answer.strip():
        assert [message.text for message in result.messages] == ["(no answer)"]
        return
    position = 0
    for message in result.messages:
        assert sink.texts[message.handle] == message.text
        assert message.start == position
        body = answer[message.start : message.end]
        text = message.text
        prefix = "" if text.startswith(body) else text[: text.index("\n") + 1]
        assert prefix == "" or FENCE_OPENING.fullmatch(prefix), text[:80]
        assert text[len(prefix) :].startswith(body)
        suffix = text[len(prefix) + len(body) :]
        assert suffix == "" or FENCE_CLOSING.fullmatch(suffix), suffix
        assert MARKER not in text
        position = message.end
    # Only a blank tail (which platforms refuse as a message) may be left unposted.
    assert not answer[position:].strip()
    if result.messages and position == len(answer):
        last = result.messages[-1]
        assert last.text.endswith(answer[last.start :])


def long_answer(rng: random.Random, chars: int) -> str:
    parts: list[str] = []
    words = ["memory", "recall", "Claude", "thread", "naïve", "日本語", "🎉", "👩‍💻", "résumé"]
    while sum(map(len, parts)) < chars:
        if rng.random() < 0.15:
            body = "".join(f"    x_{i} = f({i})  # {rng.choice(words)}\n" for i in range(40))
            parts.append(f"```python\n{body}```\n\n")
        else:
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(20, 120)))
            parts.append(sentence + rng.choice([".\n\n", ".\n", ". "]))
    return "".join(parts)[:chars]


CONFIG = StreamConfig(max_chars=3500, edit_interval_s=1.0, placeholder=None, status_text=None)


# --- throttle, final text, marker -----------------------------------------------------------


def test_10000_tokens_one_by_one_stay_within_the_throttle() -> None:
    rng = random.Random(4)
    answer = long_answer(rng, 40_000)
    tokens = tokens_of(answer, rng, low=2, high=6)
    assert len(tokens) >= 10_000

    async def main() -> tuple[ReplyResult, FakeSink, float]:
        sink = FakeSink(max_chars=3500)
        result = await stream_reply(sink, timed_deltas(tokens, every_s=0.01), CONFIG)
        return result, sink, now()

    result, sink, ended = run_virtual(main())
    check_result(result, sink, answer)
    assert result.text == answer
    assert len(result.messages) >= 12
    for message in result.messages:
        writes = sink.writes(message.handle)
        gaps = [b.at - a.at for a, b in itertools.pairwise(writes)]
        assert all(gap >= 1.0 - 1e-9 for gap in gaps), min(gaps)
        lifetime = writes[-1].at - writes[0].at
        assert len(sink.edits(message.handle)) <= math.ceil(lifetime / 1.0) + 1
        assert message.edits == len(sink.edits(message.handle))
    total_edits = sum(result.edit_counts)
    assert total_edits <= ended / 1.0 + len(result.messages)  # about one a second, not 10,000
    assert total_edits >= 0.8 * len(tokens) * 0.01  # and it did keep the user updated


def test_intermediate_edits_carry_the_marker_and_the_final_edit_drops_it() -> None:
    answer = "First line.\n```python\n" + "".join(f"print({i})\n" for i in range(30)) + "```\nEnd."

    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=2000)
        pieces = tokens_of(answer, random.Random(1), low=3, high=3)
        config = StreamConfig(max_chars=2000, edit_interval_s=0.5, placeholder=None)
        return await stream_reply(sink, timed_deltas(pieces, every_s=0.05), config), sink

    result, sink = run_virtual(main())
    edits = sink.edits("m1")
    assert sink.texts["m1"] == answer and result.messages[-1].text == answer
    assert all(call.text is not None and call.text.endswith(MARKER) for call in edits[:-1])
    # Mid-code, the partial message closes its code block before the marker.
    texts = [call.text or "" for call in edits[:-1]]
    inside = [text for text in texts if "print(0)" in text and "print(29)\n```" not in text]
    assert inside
    for text in inside:
        assert text.endswith("```" + MARKER) and text.count("```") == 2, text
    assert [c.text for c in sink.calls if c.kind == "status"] == ["is thinking…", None]


def test_first_text_is_posted_the_moment_the_first_delta_arrives() -> None:
    async def main() -> FakeSink:
        sink = FakeSink(max_chars=2000)
        deltas = timed_deltas(["Hel", "lo", " there"], every_s=0.1, first_after_s=3.0)
        await stream_reply(sink, deltas, CONFIG)
        return sink

    sink = run_virtual(main())
    first = sink.calls[0]
    assert (first.kind, first.at) == ("post", 3.0)
    assert first.text is not None and first.text.startswith("Hel")
    assert sink.texts["m1"] == "Hello there"


def test_placeholder_while_claude_thinks_then_text_within_one_interval() -> None:
    async def main() -> FakeSink:
        sink = FakeSink(max_chars=2000)
        config = StreamConfig(max_chars=2000, edit_interval_s=1.0, placeholder="_thinking…_")
        deltas = timed_deltas(["The ", "answer."], every_s=0.1, first_after_s=0.3)
        await stream_reply(sink, deltas, config)
        return sink

    sink = run_virtual(main())
    kinds = [(c.kind, c.at, c.text) for c in sink.calls]
    assert kinds[0] == ("status", 0.0, "is thinking…")
    assert kinds[1] == ("post", 0.0, "_thinking…_")
    assert kinds[2][:2] == ("edit", 1.0)  # one interval after the placeholder post
    assert sink.texts["m1"] == "The answer."
    assert kinds[-1] == ("status", kinds[-1][1], None)


class Refused(Exception):
    """A platform error no retry helps (Slack's ``is_archived``, Discord's 403)."""


@pytest.mark.parametrize("clear_fails", [False, True])
def test_a_refused_post_clears_the_status_and_raises_the_platform_error(
    clear_fails: bool,
) -> None:
    def refuse(text: str) -> None:
        raise Refused("is_archived")

    class Sink(FakeSink):
        async def status(self, *, text: str | None) -> None:
            await super().status(text=text)
            if text is None and clear_fails:
                raise RateLimited(30.0)

    async def main() -> Sink:
        sink = Sink(max_chars=2000, on_post=refuse)
        config = StreamConfig(max_chars=2000, edit_interval_s=1.0, placeholder=None)
        with pytest.raises(Refused):  # the post's error, not the failed clear's
            await stream_reply(sink, timed_deltas(["The ", "answer."], every_s=0.1), config)
        return sink

    sink = run_virtual(main())
    assert [(c.kind, c.text) for c in sink.calls] == [("status", "is thinking…"), ("status", None)]


def test_a_final_status_clear_that_fails_is_not_sent_again_on_the_error_path() -> None:
    class Sink(FakeSink):
        async def status(self, *, text: str | None) -> None:
            await super().status(text=text)
            if text is None:
                raise ConnectionResetError("reset")

    async def main() -> Sink:
        sink = Sink(max_chars=2000)
        config = StreamConfig(max_chars=2000, edit_interval_s=1.0, placeholder=None)
        with pytest.raises(ConnectionResetError):
            await stream_reply(sink, timed_deltas(["The ", "answer."], every_s=0.1), config)
        return sink

    sink = run_virtual(main())
    assert [c.text for c in sink.calls if c.kind == "status"] == ["is thinking…", None]
    assert sink.texts == {"m1": "The answer."}


def test_empty_answer_shows_a_short_line() -> None:
    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=2000)
        return await stream_reply(sink, timed_deltas([], every_s=0.1), CONFIG), sink

    result, sink = run_virtual(main())
    assert [m.text for m in result.messages] == ["(no answer)"]
    assert sink.texts == {"m1": "(no answer)"}


# --- roll-over, property ----------------------------------------------------------------------


@st.composite
def answers(draw: st.DrawFn) -> str:
    parts: list[str] = []
    words = st.sampled_from(
        ["word", "Claude", "日本語の文章。", "中文", "🎉", "👨‍👩‍👧", "🇫🇷", "x" * 30]
    )
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["text", "code", "newlines", "blob"]))
        if kind == "text":
            parts.append(" ".join(draw(st.lists(words, min_size=1, max_size=60))))
        elif kind == "code":
            language = draw(st.sampled_from(["", "python", "ts"]))
            lines = draw(st.lists(st.text("ab c=();日🎉", max_size=70), max_size=40))
            parts.append(f"\n```{language}\n" + "".join(f"{line}\n" for line in lines) + "```\n")
        elif kind == "newlines":
            parts.append("\n" * draw(st.integers(1, 3)))
        else:
            parts.append(draw(st.text("abc 中🎉\n", min_size=1, max_size=600)))
    return "".join(parts)


@settings(max_examples=60, deadline=None)
@given(answer=answers(), max_chars=st.integers(200, 700), seed=st.integers(0, 10_000))
def test_messages_concatenate_to_the_answer(answer: str, max_chars: int, seed: int) -> None:
    rng = random.Random(seed)
    pieces = tokens_of(answer, rng, low=1, high=rng.choice([3, 20, 200]))

    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=max_chars)
        config = StreamConfig(max_chars=max_chars, edit_interval_s=0.5, placeholder=None)
        deltas = timed_deltas(pieces, every_s=rng.choice([0.01, 0.2]))
        return await stream_reply(sink, deltas, config), sink

    result, sink = run_virtual(main())
    check_result(result, sink, answer)
    for message in result.messages[:-1]:  # every closed message is balanced
        assert fence_at_end(message.text, START) is None


# --- shared budget ---------------------------------------------------------------------------


def run_workspace(
    replies: int, *, budget: bool, chars: int = 3000
) -> tuple[list[ReplyResult], list[FakeSink], list[str], SlackLikeWorkspace]:
    async def main() -> tuple[list[ReplyResult], list[FakeSink], list[str], SlackLikeWorkspace]:
        workspace = SlackLikeWorkspace(limit=50, window_s=60.0)
        budgets = edit_budgets()
        rng = random.Random(7)
        texts = [long_answer(rng, chars) for _ in range(replies)]
        sinks = [FakeSink(max_chars=3500, workspace=workspace) for _ in range(replies)]
        config = StreamConfig(max_chars=3500, max_rate_limit_retries=100)

        async def one(sink: FakeSink, text: str) -> ReplyResult:
            pieces = tokens_of(text, rng)
            deltas = timed_deltas(pieces, every_s=30.0 / len(pieces))
            limiter = budgets.for_scope("slack:T1") if budget else None
            return await stream_reply(sink, deltas, config, limiter=limiter)

        results = await asyncio.gather(*(one(s, t) for s, t in zip(sinks, texts, strict=True)))
        return list(results), sinks, texts, workspace

    return run_virtual(main())


def test_ten_concurrent_replies_in_one_workspace_stay_inside_the_budget() -> None:
    results, sinks, texts, workspace = run_workspace(10, budget=True)
    assert workspace.rate_limited == 0
    assert sum(result.rate_limited for result in results) == 0
    for result, sink, text in zip(results, sinks, texts, strict=True):
        check_result(result, sink, text)
        assert result.messages[-1].text == text  # one message each, exact
    # 10 replies x 30 s wanted ~300 edits; the budget (burst 5, then 45 a minute, so at most
    # 50 in any minute) handed out all it had, and no more.
    edit_times = [c.at for sink in sinks for c in sink.calls if c.kind == "edit"]
    span = max(edit_times)
    assert 0.75 * span <= len(edit_times) <= 5 + 0.75 * span + 1


def test_without_the_budget_the_same_load_hits_429s_and_still_ends_exact() -> None:
    results, sinks, texts, workspace = run_workspace(10, budget=False)
    assert all(result.rate_limited >= 1 for result in results)
    assert sum(result.rate_limited for result in results) == workspace.rate_limited
    for result, sink, text in zip(results, sinks, texts, strict=True):
        check_result(result, sink, text)


def run_burst(
    replies: int, *, hold_s: float, answer: str = "Answer: fine, noted and done, thanks."
) -> tuple[list[ReplyResult], list[FakeSink], list[float], SlackLikeWorkspace]:
    """``replies`` short answers starting at once in one workspace (first token after 0.5 s,
    4 characters every 20 ms, as bench/load.py's fake model), Slack's defaults: a 1 s edit
    interval and the 50-a-minute budget. Also returns, per reply, the seconds from the end
    of its answer stream to its final write."""

    async def main() -> tuple[list[ReplyResult], list[FakeSink], list[float], SlackLikeWorkspace]:
        workspace = SlackLikeWorkspace(limit=50, window_s=60.0)
        limiter = edit_budgets().for_scope("slack:T1")
        sinks = [FakeSink(max_chars=3500, workspace=workspace) for _ in range(replies)]
        config = StreamConfig(max_chars=3500, busy_hold_s=hold_s, max_rate_limit_retries=100)
        ended: list[float] = [0.0] * replies

        async def one(i: int) -> ReplyResult:
            async def deltas() -> AsyncIterator[str]:
                async for piece in timed_deltas(
                    [answer[k : k + 4] for k in range(0, len(answer), 4)],
                    every_s=0.02,
                    first_after_s=0.5,
                ):
                    yield piece
                ended[i] = now()

            return await stream_reply(sinks[i], deltas(), config, limiter=limiter)

        results = list(await asyncio.gather(*(one(i) for i in range(replies))))
        lags = [
            max(c.at for c in sink.calls if c.kind in ("post", "edit")) - end
            for sink, end in zip(sinks, ended, strict=True)
        ]
        return results, sinks, lags, workspace

    return run_virtual(main())


def test_a_burst_past_the_budget_is_posted_whole_and_no_final_waits_for_minutes() -> None:
    answer = "Answer: fine, noted and done, thanks."
    results, sinks, lags, workspace = run_burst(200, hold_s=15.0, answer=answer)
    assert workspace.rate_limited == 0
    for result, sink in zip(results, sinks, strict=True):
        check_result(result, sink, answer)
    whole = [s for s in sinks if [c.kind for c in s.calls if c.kind != "status"] == ["post"]]
    assert len(whole) >= 190  # past the budget's burst: one post with the whole answer
    assert all(c.text == answer for s in whole for c in s.calls if c.kind == "post")
    assert max(lags) <= 2.0  # every answer shown whole within 2 s of its last token
    # The same burst with replies never held: every answer waits its turn for a final edit
    # of the budget's 50 a minute, the last of them for minutes.
    _, _, unheld, workspace = run_burst(200, hold_s=0.0, answer=answer)
    assert workspace.rate_limited == 0
    assert max(unheld) > 120.0


def test_a_held_long_answer_is_posted_when_the_hold_ends_and_streams_on() -> None:
    async def main() -> tuple[ReplyResult, FakeSink, float, str]:
        limiter = edit_budgets().for_scope("slack:T1")
        for _ in range(int(limiter.max_rate)):
            await limiter.acquire()  # the budget is spent
        sink = FakeSink(max_chars=3500)
        config = StreamConfig(max_chars=3500, busy_hold_s=15.0)
        text = long_answer(random.Random(3), 2000)
        pieces = tokens_of(text, random.Random(4))
        t0 = now()
        deltas = timed_deltas(pieces, every_s=40.0 / len(pieces), first_after_s=0.5)
        result = await stream_reply(sink, deltas, config, limiter=limiter)
        return result, sink, t0, text

    result, sink, t0, text = run_virtual(main())
    check_result(result, sink, text)
    kinds = [c.kind for c in sink.calls if c.kind != "status"]
    assert kinds[0] == "post" and "edit" in kinds  # no placeholder; edits after the post
    first = next(c for c in sink.calls if c.kind == "post")
    assert 15.0 <= first.at - t0 <= 16.0  # held for busy_hold_s, then the text so far
    assert MARKER in (first.text or "")


def test_budgets_are_shared_per_scope() -> None:
    async def main() -> None:
        budgets = EditBudgets(calls_per_minute=50)
        assert budgets.for_scope("slack:T1") is budgets.for_scope("slack:T1")
        assert budgets.for_scope("slack:T1") is not budgets.for_scope("slack:T2")
        assert budgets.burst == 5
        # 5 at once, then 45 a minute: the 6th waits 60/45 s.
        limiter = budgets.for_scope("slack:T3")
        for _ in range(6):
            await limiter.acquire()
        assert now() == pytest.approx(60 / 45, abs=1e-6)

    run_virtual(main())
    with pytest.raises(ValueError, match="burst"):
        EditBudgets(calls_per_minute=5, burst=5)


# --- 429s, failed edits, errors --------------------------------------------------------------


def body_of(text: str) -> str:
    return text.removesuffix(MARKER).removesuffix("\n```")


def test_429_burst_waits_retry_after_and_loses_nothing() -> None:
    attempts: list[float] = []

    def burst(handle: str, text: str) -> None:
        attempts.append(now())
        if 2 <= len(attempts) <= 5:
            raise RateLimited(2.5)

    async def main() -> tuple[ReplyResult, FakeSink, str]:
        sink = FakeSink(max_chars=2000, on_edit=burst)
        answer = long_answer(random.Random(3), 1500)
        pieces = tokens_of(answer, random.Random(3))
        result = await stream_reply(sink, timed_deltas(pieces, every_s=0.02), CONFIG)
        return result, sink, answer

    result, sink, answer = run_virtual(main())
    assert result.rate_limited == 4
    check_result(result, sink, answer)
    assert [b - a for a, b in itertools.pairwise(attempts[1:6])] == pytest.approx(
        [2.5] * 4, abs=1e-6
    )  # each retry waits exactly retry_after (longer than the edit interval)
    shown = [body_of(c.text or "") for c in sink.writes("m1")]
    assert all(b.startswith(a) for a, b in itertools.pairwise(shown)), "reordered"


def test_429_on_post_is_waited_out_and_the_newest_text_posted() -> None:
    refusals: list[float] = []

    def twice(text: str) -> None:
        if len(refusals) < 2:
            refusals.append(now())
            raise RateLimited(3.0)

    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=2000, on_post=twice)
        pieces = ["one ", "two ", "three"]
        return await stream_reply(sink, timed_deltas(pieces, every_s=2.0), CONFIG), sink

    result, sink = run_virtual(main())
    assert refusals == [0.0, 3.0]
    post = next(call for call in sink.calls if call.kind == "post")
    # The stream ended at t=4, so the post at t=6 is already the final text: no edit needed.
    assert (post.at, post.text, sink.writes("m1")) == (6.0, "one two three", [post])
    assert (result.rate_limited, sink.texts) == (2, {"m1": "one two three"})


def test_endless_429s_give_the_message_up_and_continue_in_a_new_one() -> None:
    def always(handle: str, text: str) -> None:
        if handle == "m1":
            raise RateLimited(0.5)

    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=2000, on_edit=always)
        pieces = tokens_of("word " * 200, random.Random(5))
        config = StreamConfig(max_chars=2000, placeholder=None, max_rate_limit_retries=3)
        return await stream_reply(sink, timed_deltas(pieces, every_s=0.01), config), sink

    result, sink = run_virtual(main())
    assert result.rate_limited == 4
    assert sink.edits("m1") == []
    first, *rest = result.messages
    assert not first.complete
    assert rest and all(m.complete for m in rest)
    shown = body_of(first.text)
    assert result.text.startswith(shown) and len(shown) == first.end
    assert "".join(result.text[m.start : m.end] for m in result.messages) == result.text
    assert result.messages[-1].text.endswith(result.text[rest[0].start :][-50:])


def test_edit_failing_for_good_posts_the_remainder_as_a_new_message() -> None:
    def fail_third(handle: str, text: str) -> None:
        if handle == "m1" and len(sink.edits("m1")) >= 2:
            raise EditFailed("msg_too_long")

    sink = FakeSink(max_chars=3500, on_edit=fail_third)
    answer = long_answer(random.Random(9), 2500)

    async def main() -> ReplyResult:
        pieces = tokens_of(answer, random.Random(9))
        return await stream_reply(sink, timed_deltas(pieces, every_s=0.01), CONFIG)

    result = run_virtual(main())
    first, second = result.messages
    assert (first.complete, second.complete) == (False, True)
    assert len(sink.edits("m1")) == 2
    assert first.text.endswith(MARKER)  # it cannot be edited any more
    shown = answer[: first.end]
    assert first.text.startswith(shown) and 0 < first.end < len(answer)
    assert second.start == first.end and second.end == len(answer)
    assert second.text.endswith(answer[first.end :].lstrip("\n"))  # may reopen a fence


def test_model_error_mid_stream_keeps_the_text_and_adds_a_note() -> None:
    error = ModelError("529 overloaded", user_message="Claude is overloaded, try again.")

    async def deltas() -> AsyncIterator[str]:
        yield "Part one. "
        await asyncio.sleep(2.0)
        yield "Part two"
        await asyncio.sleep(1.0)
        raise error

    async def main() -> tuple[ReplyResult, FakeSink]:
        sink = FakeSink(max_chars=2000)
        return await stream_reply(sink, deltas(), CONFIG), sink

    result, sink = run_virtual(main())
    assert result.error is error
    assert sink.texts["m1"] == "Part one. Part two\n\n⚠️ Claude is overloaded, try again."


def test_error_inside_a_code_block_closes_it_before_the_note() -> None:
    async def deltas() -> AsyncIterator[str]:
        yield "Try:\n```python\nprint(1)"
        raise StreamCutError(partial="Try:\n```python\nprint(1)\nprint(2)")

    async def main() -> FakeSink:
        sink = FakeSink(max_chars=2000)
        result = await stream_reply(sink, deltas(), CONFIG)
        assert isinstance(result.error, StreamCutError)
        return sink

    sink = run_virtual(main())
    assert sink.texts["m1"] == (
        "Try:\n```python\nprint(1)\nprint(2)\n```\n\n⚠️ The answer was cut off before it finished."
    )


def test_unexpected_error_gets_a_generic_note_and_is_raised() -> None:
    async def deltas() -> AsyncIterator[str]:
        yield "Some text"
        raise KeyError("bug")

    sink = FakeSink(max_chars=2000)
    with pytest.raises(KeyError):
        run_virtual(stream_reply(sink, deltas(), CONFIG))
    assert sink.texts["m1"] == f"Some text\n\n⚠️ {GENERIC_ERROR_NOTE}"


def test_platform_error_propagates_and_leaves_no_task() -> None:
    def broken(handle: str, text: str) -> None:
        raise ConnectionResetError("socket closed")

    async def main() -> None:
        sink = FakeSink(max_chars=2000, on_edit=broken)
        pieces = ["word "] * 200
        with pytest.raises(ConnectionResetError):
            await stream_reply(sink, timed_deltas(pieces, every_s=0.05), CONFIG)
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run_virtual(main())


def test_cancelling_a_reply_stops_its_edits_and_leaks_no_task() -> None:
    async def endless() -> AsyncIterator[str]:
        while True:
            yield "more text "
            await asyncio.sleep(0.05)

    async def main() -> None:
        sink = FakeSink(max_chars=2000)
        task = asyncio.create_task(stream_reply(sink, endless(), CONFIG))
        await asyncio.sleep(5.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        calls = len(sink.calls)
        assert calls > 3
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await asyncio.sleep(10.0)
        assert len(sink.calls) == calls

    run_virtual(main())


def test_slack_config_renders_tables_as_code() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |"

    async def main() -> FakeSink:
        sink = FakeSink(max_chars=3500)
        config = stream_config()
        await stream_reply(sink, timed_deltas([f"Table:\n{table}\n"], every_s=0.1), config)
        return sink

    sink = run_virtual(main())
    assert sink.calls[1].text == "_thinking…_"
    assert sink.texts["m1"] == f"Table:\n```\n{table}\n```\n"


def test_reply_object_api_order_is_enforced() -> None:
    async def main() -> None:
        reply = StreamedReply(FakeSink(max_chars=2000), CONFIG)
        await reply.feed("x")
        with pytest.raises(RuntimeError):
            await reply.start()
        result = await reply.finish()
        assert result.text == "x"
        with pytest.raises(RuntimeError):
            await reply.feed("y")
        await reply.aclose()

    run_virtual(main())


def test_config_refuses_impossible_values() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        StreamConfig(max_chars=40)
    with pytest.raises(ValueError, match="edit_interval_s"):
        StreamConfig(max_chars=2000, edit_interval_s=0)
    with pytest.raises(ValueError, match="placeholder"):
        StreamConfig(max_chars=2000, placeholder="  ")
    with pytest.raises(ValueError, match="busy_hold_s"):
        StreamConfig(max_chars=2000, busy_hold_s=-1)


async def test_real_event_loop_with_default_clock() -> None:
    sink = FakeSink(max_chars=400)
    answer = "A real loop. " * 60
    pieces = tokens_of(answer, random.Random(2), low=20, high=40)
    config = StreamConfig(max_chars=400, edit_interval_s=0.01, placeholder=None)
    result = await stream_reply(sink, timed_deltas(pieces, every_s=0.002), config)
    check_result(result, sink, answer)
    assert len(result.messages) >= 2


@pytest.mark.parametrize("native", [False, True])
def test_the_status_is_refreshed_while_the_model_thinks_then_cleared_once(native: bool) -> None:
    """Slack drops a status after two minutes (assistant.threads.setStatus): it is shown
    again every 90 s until the first token, never after it, and cleared once at the end."""
    from core.streaming.native import NativeReply
    from tests.core.streaming.test_native_stream import Sink

    class NativeSink(Sink):
        def __init__(self) -> None:
            super().__init__(max_chars=10_000)
            self.statuses: list[tuple[float, str | None]] = []

        async def status(self, *, text: str | None) -> None:
            self.statuses.append((now(), text))

    config = StreamConfig(max_chars=2000, placeholder=None, status_refresh_s=90.0)

    async def main() -> list[tuple[float, str | None]]:
        pieces = ["The ", "answer ", "takes ", "its ", "time."]
        deltas = timed_deltas(pieces, every_s=60.0, first_after_s=300.0)
        if native:
            native_sink = NativeSink()
            await stream_reply(native_sink, deltas, config, reply=NativeReply(native_sink, config))
            return native_sink.statuses
        sink = FakeSink(max_chars=2000)
        await stream_reply(sink, deltas, config)
        return [(c.at, c.text) for c in sink.calls if c.kind == "status"]

    statuses = run_virtual(main())
    thinking = "is thinking…"
    assert statuses[:-1] == [
        (0.0, thinking),
        (90.0, thinking),
        (180.0, thinking),
        (270.0, thinking),
    ]
    assert statuses[-1][1] is None and statuses[-1][0] >= 540.0  # once, after the last token
    assert stream_config().status_refresh_s == 90.0
