"""An asyncio event loop on simulated time, and a Slack-like edit limit measured on it.

The loop's clock jumps to the next timer whenever nothing is ready, so ``asyncio.sleep``,
aiolimiter and the streaming edit throttle all run on simulated seconds: a 100-second stream
takes milliseconds, and timings are exact. Used by ``tests/core/streaming/test_streaming.py`` and
``bench/stream.py``.
"""

from __future__ import annotations

import asyncio
import selectors
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from core.errors import RateLimited

T = TypeVar("T")


class _JumpSelector(selectors.DefaultSelector):
    """A selector that, instead of blocking, advances the loop's virtual clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ready: Callable[[], bool] = lambda: False

    def select(self, timeout: float | None = None) -> list[Any]:
        events: list[Any] = super().select(0)
        if events:
            return events
        if timeout is None:
            raise RuntimeError("virtual-time loop deadlock: nothing ready, no timer set")
        if timeout == 0 and not self.ready():
            # Only a due timer: aiolimiter can round its wake-up to this very instant and
            # spin; one nanosecond of virtual time ends that.
            timeout = 1e-9
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time: ``time()`` jumps to the next timer when idle."""

    def __init__(self) -> None:
        self._jump = _JumpSelector()
        super().__init__(self._jump)
        self._jump.ready = lambda: bool(self._ready)  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._jump.now


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)


def now() -> float:
    """The running loop's time (simulated seconds on a :class:`VirtualTimeLoop`)."""
    return asyncio.get_running_loop().time()


class SlackLikeWorkspace:
    """Refuses a ``chat.update`` beyond ``limit`` in any ``window_s`` (sliding window) with
    ``RateLimited``, as Slack's tier 3 does; counts the refusals in ``rate_limited``."""

    def __init__(self, *, limit: int = 50, window_s: float = 60.0) -> None:
        self.limit, self.window_s = limit, window_s
        self.edit_times: deque[float] = deque()
        self.rate_limited = 0

    def check_edit(self) -> None:
        """Admit one edit at the loop's current time, or raise ``RateLimited``."""
        t = now()
        while self.edit_times and self.edit_times[0] <= t - self.window_s + 1e-9:
            self.edit_times.popleft()
        if len(self.edit_times) >= self.limit:
            self.rate_limited += 1
            raise RateLimited(self.edit_times[0] + self.window_s - t)
        self.edit_times.append(t)
