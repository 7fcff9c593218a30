"""The JSON body of one Messages request, streamed: file bytes base64-encoded as they are sent.

Building a request with a 20 MB PDF whole took about six times the file in memory (the
base64 text, the JSON text, its UTF-8 bytes, kept while the answer streamed). Here the body
is the JSON the SDK itself would send (``messages.create`` encodes with ``ensure_ascii=False``
and no spaces: :func:`dumps`) of the request with a marker in place of each file's base64
``data``; the JSON around
the markers is small, and each file is base64-encoded in :data:`CHUNK_BYTES` pieces as the
transport reads them. The bytes sent are exactly those ``messages.create`` sends (base64 is
JSON-safe: no character of it is escaped).

A :class:`RequestBody` is re-iterable (the SDK sends it again when it retries) and knows its
length (sent as ``Content-Length``); :meth:`RequestBody.release` drops the file bytes once the
response has begun, so an answer that streams for a minute no longer holds them.
"""

from __future__ import annotations

import base64
import json
import math
import secrets
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

CHUNK_BYTES = 3 * 64 * 1024
"""File bytes encoded at a time (a multiple of 3: the pieces join into one base64 text)."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def dumps(body: Mapping[str, Any]) -> bytes:
    """``body`` as the SDK sends it (``anthropic._utils._json.openapi_dumps``'s options)."""
    return _ENCODER.encode(body).encode()


def base64_size(n: int) -> int:
    """Length of the base64 text of ``n`` bytes."""
    return 4 * math.ceil(n / 3)


class FileMarkers:
    """Stand-ins for file bytes in a request being built: :meth:`marker` gives the string
    put where a file's base64 ``data`` goes; :class:`RequestBody` swaps them back."""

    def __init__(self) -> None:
        self._prefix = f"selfmind-file-{secrets.token_hex(16)}-"
        self.files: list[bytes | bytearray] = []

    def marker(self, data: bytes | bytearray) -> str:
        """The stand-in for ``data``'s base64 text (unguessable, JSON-safe)."""
        self.files.append(data)
        return f"{self._prefix}{len(self.files) - 1}"

    def base64_chars(self, marker: str) -> int | None:
        """The length of the base64 text ``marker`` stands for (None: not one of these)."""
        index = marker.removeprefix(self._prefix)
        if index == marker or not index.isdigit() or int(index) >= len(self.files):
            return None
        return base64_size(len(self.files[int(index)]))

    def markers(self) -> list[bytes]:
        return [f'"{self._prefix}{i}"'.encode() for i in range(len(self.files))]


class RequestBody:
    """``body`` (a JSON object holding :class:`FileMarkers` markers) as the bytes sent:
    iterate (``async for``) for them, any number of times until :meth:`release`."""

    def __init__(self, body: Mapping[str, Any], files: FileMarkers) -> None:
        text = dumps(body)
        self._parts: list[bytes] = []
        self._files: list[memoryview] = []
        for marker, data in zip(files.markers(), files.files, strict=True):
            before, found, text = text.partition(marker)
            if not found:
                raise ValueError("a file's marker is missing from the request body")
            self._parts.append(before + b'"')
            self._files.append(memoryview(data))
            text = b'"' + text
        self._parts.append(text)
        self.length = sum(map(len, self._parts)) + sum(base64_size(f.nbytes) for f in self._files)

    @property
    def has_files(self) -> bool:
        return bool(self._files)

    def whole(self) -> bytes:
        """The body at once (for a request without files: nothing to stream)."""
        return b"".join(self._parts) if not self._files else b"".join(self._chunks())

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks():
            yield chunk

    def _chunks(self) -> Iterator[bytes]:
        parts, files = self._parts, self._files
        if not parts:
            raise RuntimeError("the request body was released")
        for i, part in enumerate(parts):
            yield part
            if i < len(files):
                view = files[i]
                for start in range(0, view.nbytes, CHUNK_BYTES):
                    yield base64.b64encode(view[start : start + CHUNK_BYTES])

    def release(self) -> None:
        """Drop the file bytes and the JSON (the request can no longer be sent)."""
        self._files = []
        self._parts = []


__all__ = ["CHUNK_BYTES", "FileMarkers", "RequestBody", "base64_size", "dumps"]
