"""The busy-workspace edit budget (core/streaming/reply.py), adversarial cases: cancellation
while held, the budget's 60-second window, and random faults over a shared budget."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from bots.slack_bot.platform import edit_budgets
from core.errors import EditFailed, ModelError, RateLimited
from core.streaming.reply import ReplyResult, StreamConfig, StreamedReply, stream_reply
from tests.core.streaming.test_streaming import (
    FakeSink,
    check_result,
    long_answer,
    timed_deltas,
    tokens_of,
)
from tests.fakes.virtual_time import SlackLikeWorkspace, now, run_virtual


async def _spend(limiter: object) -> None:
    for _ in range(int(limiter.max_rate)):  # type: ignore[attr-defined]
        await limiter.acquire()  # type: ignore[attr-defined]


def test_aclose_of_a_held_reply_right_after_a_feed_stops_it() -> None:
    """aclose() cancels the task while it waits in asyncio.wait_for(wake.wait(), held).
    On Python 3.11, wait_for swallows a cancellation that arrives once the inner wait is
    already done (feed() just set the event): the task runs on, posts after aclose, then
    waits for a wake forever, and aclose() never returns."""

    async def main() -> tuple[bool, FakeSink]:
        limiter = edit_budgets().for_scope("slack:T1")
        await _spend(limiter)
        sink = FakeSink(max_chars=3500)
        reply = StreamedReply(sink, StreamConfig(max_chars=3500), limiter=limiter)
        await reply.start()  # budget spent: held
        for _ in range(5):
            await asyncio.sleep(0)  # the task now waits in wait_for
        await reply.feed("partial answer")
        try:
            await asyncio.wait_for(reply.aclose(), 120.0)
        except TimeoutError:
            return False, sink
        await asyncio.sleep(60.0)
        return True, sink

    closed, sink = run_virtual(main())
    assert closed, "aclose() never returned: the reply task survived its cancellation"
    assert [c.kind for c in sink.calls if c.kind != "status"] == []  # no sink call after aclose


def test_tokens_taken_at_start_are_spent_later_and_break_the_50_a_minute_window() -> None:
    """Each reply takes its final edit's token at start(); the edit itself comes when its
    answer ends. 50 replies that start over a minute (each finding a free token) and finish
    together make 50 edits in one second, and 5 more replies then burst 5 more: 55 edits in
    a 60 s window, which Slack refuses (the budget's promise: at most 50 in any minute)."""

    async def main() -> tuple[list[ReplyResult], list[FakeSink], SlackLikeWorkspace]:
        workspace = SlackLikeWorkspace(limit=50, window_s=60.0)
        limiter = edit_budgets().for_scope("slack:T1")
        config = StreamConfig(max_chars=3500, max_rate_limit_retries=100)
        starts = [0.0] * 5 + [(i + 1) * 1.34 for i in range(45)] + [74.0] * 5
        answer_at = [75.0] * 50 + [76.0] * 5
        sinks = [FakeSink(max_chars=3500, workspace=workspace) for _ in starts]

        async def one(i: int) -> ReplyResult:
            await asyncio.sleep(starts[i])

            async def deltas() -> AsyncIterator[str]:
                await asyncio.sleep(answer_at[i] - now())
                yield f"answer {i}"

            return await stream_reply(sinks[i], deltas(), config, limiter=limiter)

        results = list(await asyncio.gather(*(one(i) for i in range(len(starts)))))
        return results, sinks, workspace

    results, sinks, workspace = run_virtual(main())
    for i, (result, sink) in enumerate(zip(results, sinks, strict=True)):
        check_result(result, sink, f"answer {i}")
    assert workspace.rate_limited == 0, f"{workspace.rate_limited} edits refused (429)"


@pytest.mark.parametrize("seed", range(40))
def test_random_faults_with_a_shared_busy_budget_end_exact(seed: int) -> None:
    """Held and unheld replies, long and short, with 429s on posts and edits, EditFailed,
    model errors with a note, in one workspace: every reply ends, exact."""
    rng = random.Random(seed)

    async def main() -> list[tuple[ReplyResult, FakeSink, str]]:
        limiter = edit_budgets().for_scope("slack:T1")
        if rng.random() < 0.5:
            await _spend(limiter)
        config = StreamConfig(
            max_chars=rng.choice([200, 3500]),
            busy_hold_s=rng.choice([0.0, 2.0, 15.0]),
            max_rate_limit_retries=rng.choice([0, 2, 100]),
            placeholder=rng.choice([None, "_thinking…_"]),
        )
        out: list[tuple[ReplyResult, FakeSink, str]] = []

        async def one(k: int) -> None:
            await asyncio.sleep(rng.random() * 10)
            text = long_answer(rng, rng.choice([10, 150, 900, 5000]))

            def on_edit(handle: str, _: str) -> None:
                r = rng.random()
                if r < 0.05:
                    raise RateLimited(rng.random() * 3)
                if r < 0.07:
                    raise EditFailed("msg_too_long")

            def on_post(_: str) -> None:
                if rng.random() < 0.05:
                    raise RateLimited(rng.random() * 3)

            sink = FakeSink(max_chars=config.max_chars, on_edit=on_edit, on_post=on_post)
            pieces = tokens_of(text, rng, low=1, high=40)
            fail = rng.random() < 0.2

            async def deltas() -> AsyncIterator[str]:
                async for piece in timed_deltas(
                    pieces, every_s=rng.choice([0.01, 0.1, 0.5]), first_after_s=rng.random() * 5
                ):
                    yield piece
                if fail:
                    raise ModelError("boom", user_message="Claude failed.")

            try:
                result = await stream_reply(sink, deltas(), config, limiter=limiter)
            except RateLimited:  # a post 429ed past its retries: the platform error, raised
                assert config.max_rate_limit_retries < 100
                return
            expected = result.text
            assert expected.startswith(text)
            out.append((result, sink, expected))

        await asyncio.wait_for(asyncio.gather(*(one(k) for k in range(12))), 3600)
        return out

    results = run_virtual(main())
    assert results  # most replies end with an answer
    for result, sink, text in results:
        if all(m.complete for m in result.messages):
            check_result(result, sink, text)


@pytest.mark.parametrize("turns", range(4))
def test_a_held_answer_cancelled_just_after_a_delta_ends_as_the_bots_shutdown_expects(
    turns: int,
) -> None:
    """The Slack bot's shutdown cancels unfinished answers and gathers them. An answer task
    cancelled while its held reply is waking up for a delta survives (Python 3.11
    wait_for): stream_reply's finally (aclose) waits for it forever, and so would shutdown."""

    async def main() -> tuple[bool, list[str]]:
        limiter = edit_budgets().for_scope("slack:T1")
        await _spend(limiter)
        sink = FakeSink(max_chars=3500)

        async def deltas() -> AsyncIterator[str]:
            await asyncio.sleep(1.0)
            yield "the first words"
            await asyncio.sleep(100.0)
            yield " and more"

        answer = asyncio.ensure_future(
            stream_reply(sink, deltas(), StreamConfig(max_chars=3500), limiter=limiter)
        )
        await asyncio.sleep(1.0)
        for _ in range(turns):
            await asyncio.sleep(0)  # the answer task has just fed its delta
        answer.cancel()
        done, _ = await asyncio.wait({answer}, timeout=300.0)
        return bool(done), [c.kind for c in sink.calls if c.kind != "status"]

    ended, calls = run_virtual(main())
    assert ended, f"the cancelled answer never ended (sink calls after the cancel: {calls})"
