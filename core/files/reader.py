"""Reading the files of one message for one turn: downloads, checks, and the sentences.

:class:`FileReader` is the one rule every adapter's files go through (the adapters only
build :class:`core.files.refs.FileRef`\\ s from their wire format). For each file, in order:
fetch it (:func:`core.files.fetch.fetch`: size caps, origins, timeout), make it a content
block (:func:`core.files.prepare.prepare`: types, the API's image, PDF and page limits),
then count it against the request's own limits (at most :data:`~core.files.prepare.MAX_MEDIA`
images and PDFs; the request under 32 MB). A file that fails any step is left out and
gets one sentence, ``I couldn't read NAME: REASON.``; the others are read, and the
message's text is answered all the same.

Memory: a turn holds its files' bytes from the download until its request is sent, so a turn
that reads files first reserves their declared sizes from the process's
:class:`~core.files.budget.ByteBudget` (:meth:`FileReader.hold`; ``SELFMIND_FILE_MEMORY_MB``
for all turns together) and waits while it cannot; once read, it keeps only what its files
take. bench/files.py measures the bound. Nothing here writes bytes anywhere: no store, no
log, no temporary file.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import traceback
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.files.budget import ByteBudget, Reservation
from core.files.fetch import FileProblem, fetch, too_big
from core.files.prepare import (
    HEAD_BYTES,
    MANY_IMAGES,
    MAX_IMAGE_SIDE,
    MAX_IMAGE_SIDE_MANY,
    MAX_MEDIA,
    MAX_REQUEST_BYTES,
    PDF_TIMEOUT_S,
    REQUEST_RESERVE_BYTES,
    Prepared,
    prepare,
    refused_type,
    sniff,
)
from core.files.refs import FileRef
from core.model.body import base64_size
from core.model.claude import FileBlock
from core.settings import Settings

if TYPE_CHECKING:
    import aiohttp  # imported by the first read (half a second): a chat that reads no file

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadFiles:
    """What one turn read: the content blocks for Claude, in message order, and the
    sentences the person is shown (files not read, or read only in part)."""

    blocks: tuple[FileBlock, ...] = ()
    notes: tuple[str, ...] = ()


def not_read(name: str, reason: str) -> str:
    """The sentence for a file that was not read."""
    return f"I couldn't read {name}: {reason}."


def gone_note(names: Sequence[str]) -> str:
    """The sentence for files of a message answered again after a restart: never kept, so
    the answer comes from their placeholders."""
    listed = ", ".join(names)
    it = "it" if len(names) == 1 else "them"
    return (
        f"I no longer have {listed} (files are never kept), so I answered from the "
        f"message alone; send {it} again if you want me to read {it}."
    )


MESSAGE_PARSE_FILES = 3
"""A message's PDFs together may take this many times ``SELFMIND_FILE_PARSE_TIMEOUT_S`` to
parse (each at most once that): ten junk PDFs in one message wait 30 s, not 100 s, before
the answer (``bench/pdf_bound.py --ten``)."""
MIN_PARSE_S = 0.5
"""A file is not started with less parse time than this left of its message's."""
_NO_TIME_LEFT = "the files before it took all the time I give one message's files"
UNEXPECTED = "an unexpected error"
"""What the note says of an error no rule above expected (its type is logged)."""
_OVER_REQUEST = "it would pass the 32 MB Claude takes in one request (files and text together)"


class FileReader:
    """Reads the files of messages (see the module docstring). One per process; no
    resource to close (each read opens its own HTTP session)."""

    def __init__(
        self,
        *,
        max_file_bytes: int,
        max_text_chars: int,
        download_timeout_s: float,
        memory_bytes: int,
        parse_timeout_s: float = PDF_TIMEOUT_S,
    ) -> None:
        self.max_file_bytes = max_file_bytes
        self.max_text_chars = max_text_chars
        self.download_timeout_s = download_timeout_s
        self.parse_timeout_s = parse_timeout_s
        self.budget = ByteBudget(memory_bytes)

    @classmethod
    def from_settings(cls, settings: Settings) -> FileReader:
        return cls(
            max_file_bytes=settings.file_max_mb * 1024 * 1024,
            max_text_chars=settings.file_max_text_chars,
            download_timeout_s=settings.file_download_timeout_s,
            memory_bytes=settings.file_memory_mb * 1024 * 1024,
            parse_timeout_s=settings.file_parse_timeout_s,
        )

    def refusal(self, ref: FileRef, head: bytes | bytearray, *, attached: int = 0) -> str | None:
        """Why ``ref`` would never be read, known before reading it: ``head`` is its first
        :data:`~core.files.prepare.HEAD_BYTES` (or all of it), ``attached`` how many files
        its message already has. Too many files, over the per-file limit (its declared
        size), a PDF too big for one request, or a kind never read (:func:`refused_type`);
        None when it may be read. The same limits :meth:`read` applies, told at once (the
        terminal's ``/attach``)."""
        if attached >= MAX_MEDIA:
            return f"I read at most {MAX_MEDIA} files of one message"
        if ref.size is not None and ref.size > self.max_file_bytes:
            return too_big(ref.size, self.max_file_bytes).reason
        budget = MAX_REQUEST_BYTES - REQUEST_RESERVE_BYTES
        pdf = sniff(head) == "application/pdf" or (ref.kind == "pdf" and sniff(head) is None)
        if pdf and ref.size is not None and ref.size > (budget - 200) * 3 // 4:
            return _OVER_REQUEST
        return refused_type(ref, head[:HEAD_BYTES])

    def hold(self, refs: Sequence[FileRef]) -> AbstractAsyncContextManager[Reservation]:
        """Held by a turn from reading ``refs`` until its request is sent: the bytes they may
        take (:meth:`reserve_bytes`) reserved from the budget, waiting while it cannot."""
        return self.budget.reserve(self.reserve_bytes(refs))

    def reserve_bytes(self, refs: Sequence[FileRef]) -> int:
        """What reading ``refs`` may hold at most: each file's declared size (the per-file
        limit when none is declared; nothing for a file refused before any download)."""
        total = 0
        for ref in refs[:MAX_MEDIA]:
            if ref.unavailable or (ref.size is not None and ref.size > self.max_file_bytes):
                continue
            total += self.max_file_bytes if ref.size is None else ref.size
        return total

    async def read(self, refs: Sequence[FileRef], *, held: Reservation | None = None) -> ReadFiles:
        """Read ``refs`` (see the module docstring); never raises for a bad file. With
        ``held`` (from :meth:`hold`), what the files read do not take is given back."""
        read = await self._read(refs)
        if held is not None:
            held.shrink(sum(held_bytes(block) for block in read.blocks))
        return read

    async def _read(self, refs: Sequence[FileRef]) -> ReadFiles:
        blocks: list[FileBlock] = []
        notes: list[str] = []
        if len(refs) > MAX_MEDIA:
            extra = len(refs) - MAX_MEDIA
            notes.append(
                f"I read at most {MAX_MEDIA} files of one message; {extra} more were not read."
            )
            refs = refs[:MAX_MEDIA]
        images_like = sum(1 for r in refs if r.kind in ("image", "file"))
        max_side = MAX_IMAGE_SIDE_MANY if images_like > MANY_IMAGES else MAX_IMAGE_SIDE
        budget = MAX_REQUEST_BYTES - REQUEST_RESERVE_BYTES
        parsing = [MESSAGE_PARSE_FILES * self.parse_timeout_s]  # seconds left to parse
        import aiohttp

        async with aiohttp.ClientSession() as session:
            for ref in refs:
                try:
                    if parsing[0] < MIN_PARSE_S:
                        raise FileProblem(_NO_TIME_LEFT)
                    prepared = await self._read_one(
                        ref, session=session, max_side=max_side, budget=budget, parsing=parsing
                    )
                    cost = request_bytes(prepared.block)
                    if cost > budget:
                        raise FileProblem(_OVER_REQUEST)
                except FileProblem as problem:
                    logger.info("file not read (%s): %s", ref.kind, problem.reason)
                    notes.append(not_read(ref.name, problem.reason))
                    _drop_frames(problem)
                    continue
                except Exception as exc:  # a bug or a library's surprise: still one note
                    logger.warning("file not read (%s): %s", ref.kind, type(exc).__name__)
                    notes.append(not_read(ref.name, f"it could not be read ({UNEXPECTED})"))
                    _drop_frames(exc)
                    continue
                budget -= cost
                blocks.append(prepared.block)
                if prepared.note:
                    notes.append(prepared.note)
                logger.info("file read: %s, %d bytes sent", prepared.block.kind, cost)
        return ReadFiles(tuple(blocks), tuple(notes))

    async def _read_one(
        self,
        ref: FileRef,
        *,
        session: aiohttp.ClientSession,
        max_side: int,
        budget: int,
        parsing: list[float],
    ) -> Prepared:
        """Fetch and prepare one file. Its bytes live in this frame, which a refused file's
        traceback holds: dropped here, and the traceback's other frames cleared by
        :func:`_drop_frames`, they go at once, not when the garbage collector runs.
        ``parsing[0]``: the seconds the message's files may still spend being parsed (this
        one at most ``parse_timeout_s`` of them), less what this one spent."""
        max_bytes = self.max_file_bytes
        if ref.kind == "pdf":  # sent as is: its base64 must fit the request
            max_bytes = min(max_bytes, (budget - 200) * 3 // 4)
            if ref.size is not None and max_bytes < ref.size <= self.max_file_bytes:
                raise FileProblem(_OVER_REQUEST)
        data = await fetch(
            ref, session=session, max_bytes=max_bytes, timeout_s=self.download_timeout_s
        )
        started = time.monotonic()
        try:
            return await asyncio.to_thread(
                prepare,
                ref,
                data,
                max_side=max_side,
                max_text_chars=self.max_text_chars,
                pdf_timeout_s=min(self.parse_timeout_s, parsing[0]),
            )
        finally:
            del data
            parsing[0] -= time.monotonic() - started


def _drop_frames(error: BaseException) -> None:
    """Clear the finished frames of ``error``'s tracebacks, its causes' included: they hold
    the file's bytes (and copies pypdf or Pillow made) in a cycle with the exceptions, which
    would otherwise keep them until the garbage collector runs."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def held_bytes(block: FileBlock) -> int:
    """The memory ``block``'s data takes."""
    return sys.getsizeof(block.data)


def request_bytes(block: FileBlock) -> int:
    """About what ``block`` adds to the request's JSON (text escapes counted high)."""
    if isinstance(block.data, str):
        return len(block.data.encode("utf-8")) * 6 // 5 + 200
    return base64_size(len(block.data)) + 200
