"""Admission control for answers: a bounded number of turns answered at once, first come
first served, and each person's messages answered one after another, in order.

Acknowledgements never wait here: a message is claimed and stored (``Intake.receive``)
before its platform is acknowledged, and only the answer (``Intake.respond``: the model's
stream and the platform's edits) is admitted. Under a burst the answers queue, the
acknowledgements do not: with every answer of 200 users streaming at once, the event loop is
shared by 200 streams and their edits, and an event's handler waits its turn behind them
(bench/load.py: the acknowledgement p95 at 200 users).

Fairness: a person's second message waits for their first answer (it is answered with the
first in its history, and one person cannot take several places); while they wait they hold
no place, so another person's answer is never queued behind them. ``max_turns`` is
``SELFMIND_MAX_CONCURRENT_TURNS``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class Admission:
    """At most ``max_turns`` answers at once (FIFO), one at a time per ``user_key``."""

    def __init__(self, *, max_turns: int) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.max_turns = max_turns
        self._running = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._users: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, int] = {}

    @property
    def running(self) -> int:
        """Answers admitted and not yet finished."""
        return self._running

    @property
    def waiting(self) -> int:
        """Answers waiting for a place (not counting those waiting for the same person's
        earlier answer)."""
        return sum(1 for f in self._queue if not f.done())

    @contextlib.asynccontextmanager
    async def turn(self, user_key: str) -> AsyncIterator[None]:
        """Hold a place for one answer of ``user_key`` while the block runs: first after the
        person's earlier answers, then after the answers admitted before it."""
        lock = self._users.get(user_key)
        if lock is None:
            lock = self._users[user_key] = asyncio.Lock()
        self._holders[user_key] = self._holders.get(user_key, 0) + 1
        try:
            async with lock:  # asyncio.Lock wakes its waiters in order
                await self._acquire()
                try:
                    yield
                finally:
                    self._release()
        finally:
            self._holders[user_key] -= 1
            if not self._holders[user_key]:
                del self._holders[user_key]
                del self._users[user_key]

    async def _acquire(self) -> None:
        if self._running < self.max_turns and not self.waiting:
            self._running += 1
            return
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(place)
        try:
            await place  # _release hands its place over: _running already counts this one
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self._release()  # handed a place just as it was cancelled: pass it on
            raise

    def _release(self) -> None:
        while self._queue:
            place = self._queue.popleft()
            if not place.done():
                place.set_result(None)  # the place passes on; _running stays the same
                return
        self._running -= 1
