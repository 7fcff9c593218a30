"""The byte budget of files held at once: a burst waits in order, never holds more than the
budget, and every exit (an error, a cancellation) gives the bytes back."""

from __future__ import annotations

import asyncio

import pytest

from core.files import FileReader, FileRef
from core.files.budget import ByteBudget


async def test_a_burst_waits_first_come_first_served_and_never_exceeds_the_budget() -> None:
    budget = ByteBudget(100)
    order: list[int] = []
    peak = 0
    gates = [asyncio.Event() for _ in range(6)]

    async def turn(i: int, n: int) -> None:
        nonlocal peak
        async with budget.reserve(n):
            order.append(i)
            peak = max(peak, budget.used_bytes)
            await gates[i].wait()

    tasks = [asyncio.create_task(turn(i, 40)) for i in range(6)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == [0, 1] and budget.used_bytes == 80 and budget.waiting == 4
    for i in range(6):
        gates[i].set()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4, 5]
    assert peak <= 100 and budget.used_bytes == 0 and budget.waiting == 0


async def test_one_reservation_larger_than_the_budget_runs_alone() -> None:
    budget = ByteBudget(100)
    async with budget.reserve(10) as small:
        big = asyncio.create_task(_hold(budget, 500))
        await asyncio.sleep(0)
        assert budget.waiting == 1 and small.held == 10
    await asyncio.sleep(0)
    held = await big
    assert held == 100 and budget.used_bytes == 0


async def _hold(budget: ByteBudget, n: int) -> int:
    async with budget.reserve(n) as reservation:
        assert budget.used_bytes >= reservation.held
        return reservation.held


async def test_shrink_gives_bytes_back_to_the_next_in_line() -> None:
    budget = ByteBudget(100)
    async with budget.reserve(90) as first:
        second = asyncio.create_task(_hold(budget, 50))
        await asyncio.sleep(0)
        assert budget.waiting == 1
        first.shrink(30)
        assert await second == 50
        assert budget.used_bytes == 30
    assert budget.used_bytes == 0


async def test_an_error_or_a_cancellation_releases_the_reservation() -> None:
    budget = ByteBudget(100)
    with pytest.raises(RuntimeError):
        async with budget.reserve(60):
            raise RuntimeError("the answer failed")
    assert budget.used_bytes == 0

    blocker = asyncio.Event()

    async def wait_inside() -> None:
        async with budget.reserve(60):
            await blocker.wait()

    inside = asyncio.create_task(wait_inside())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(_hold(budget, 60))
    behind = asyncio.create_task(_hold(budget, 30))
    await asyncio.sleep(0)
    assert budget.waiting == 2
    waiting.cancel()  # cancelled while waiting: leaves the queue, the next one moves up
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await behind == 30
    inside.cancel()  # cancelled while holding
    with pytest.raises(asyncio.CancelledError):
        await inside
    assert budget.used_bytes == 0 and budget.waiting == 0


def test_a_turn_reserves_the_declared_sizes_or_the_limit() -> None:
    reader = FileReader(
        max_file_bytes=1000, max_text_chars=1000, download_timeout_s=5, memory_bytes=5000
    )
    refs = [
        FileRef("a.png", size=300),
        FileRef("b.log"),  # no size declared: the per-file limit
        FileRef("c.pdf", size=5000),  # over the limit: refused before any download
        FileRef("d.png", unavailable="Slack did not share it with me"),
    ]
    assert reader.reserve_bytes(refs) == 1300
