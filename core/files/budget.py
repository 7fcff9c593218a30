"""The memory budget of files held at once: a byte count shared by every turn of a process.

A turn that reads files first reserves the bytes they may take (:meth:`ByteBudget.reserve`:
each file's declared size, or the per-file limit when none is declared), waits, first come
first served, while the budget cannot hold them, and keeps the reservation until its
request is sent (the answer begun or the sending failed: its body, the files' bytes in it,
is let go then; ``ChatModel.stream``'s ``on_sent``);
once its files are read it gives back what they did not take (:meth:`Reservation.shrink`).
A reservation larger than the whole budget (one file over it) is cut to the budget: that
turn then reads alone. Released on every exit, an error or a
cancellation included. Turns without files never touch it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class Reservation:
    """Bytes one turn holds of a :class:`ByteBudget` (``held``)."""

    def __init__(self, budget: ByteBudget, held: int) -> None:
        self._budget = budget
        self.held = held

    def shrink(self, to: int) -> None:
        """Keep at most ``to`` bytes; the rest goes back to the budget at once."""
        extra = self.held - max(0, to)
        if extra > 0:
            self.held -= extra
            self._budget._release(extra)


class ByteBudget:
    """At most ``total_bytes`` reserved at once; see the module docstring."""

    def __init__(self, total_bytes: int) -> None:
        if total_bytes < 1:
            raise ValueError("a byte budget needs at least one byte")
        self.total_bytes = total_bytes
        self.used_bytes = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Reservations waiting for bytes."""
        return len(self._waiters)

    @contextlib.asynccontextmanager
    async def reserve(self, n_bytes: int) -> AsyncIterator[Reservation]:
        """Wait until ``n_bytes`` (at most the whole budget) are free, hold them for the
        ``async with`` block, and give back what is still held when it exits."""
        n = min(max(0, n_bytes), self.total_bytes)
        await self._acquire(n)
        reservation = Reservation(self, n)
        try:
            yield reservation
        finally:
            reservation.shrink(0)

    async def _acquire(self, n: int) -> None:
        if not self._waiters and self.used_bytes + n <= self.total_bytes:
            self.used_bytes += n
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (n, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(n)  # granted as it was cancelled: give it back
            else:
                with contextlib.suppress(ValueError):  # _wake may have dropped it
                    self._waiters.remove(entry)
                self._wake()  # the next in line may fit now
            raise

    def _release(self, n: int) -> None:
        self.used_bytes -= n
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            n, waiter = self._waiters[0]
            if waiter.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if self.used_bytes + n > self.total_bytes:
                return
            self._waiters.popleft()
            self.used_bytes += n
            waiter.set_result(None)
