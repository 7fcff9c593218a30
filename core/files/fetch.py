"""Fetching one file's bytes for one turn: over HTTP(S) from a platform, or from a local path.

One rule for every adapter (:func:`fetch`):

- the declared size is checked before anything is downloaded, and the bytes as they arrive:
  the body is read in chunks and the download stops as soon as it passes ``max_bytes``
  (nothing larger is ever held); the whole download, redirects included, has ``timeout_s``;
- a download may reach only the ref's ``allowed_origins`` (``scheme://host:port``): a link
  elsewhere is not fetched, and a redirect elsewhere is not followed (the bearer token, sent
  as ``Authorization: Bearer``, so never leaves them); at most :data:`MAX_REDIRECTS`; a link
  or redirect with user info (``http://x@host/``) or no valid address (port 99999) is
  refused the same way (:func:`link_origin`);
- a platform that answers a file download with a web page (Slack's sign-in page for a file
  the token cannot see) is refused, as are 401/403/404 and other statuses; nothing is
  retried.

Every failure is a :class:`FileProblem` whose ``reason`` ends the sentence the person sees.
Bytes are held in memory only, never written anywhere.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from core.files.refs import FileRef, human_size

if TYPE_CHECKING:
    import aiohttp  # imported by the reader that opens a session, not by importing this

MAX_REDIRECTS = 5
CHUNK_BYTES = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FileProblem(Exception):
    """A file that is not read; ``reason`` ends "I couldn't read NAME: REASON."."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the default port written out), lower-case."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"https": 443, "http": 80}.get(scheme, 0)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


_BAD_LINK = "its link is not a valid address, so I did not open it"


def link_origin(url: str) -> str:
    """:func:`origin` of a link from a message or a redirect, refused as a
    :class:`FileProblem` when it has user info (``http://x@files.slack.com/...``: a
    download never carries credentials but the platform's token) or is no valid address
    (a port out of range or not a number, a malformed host)."""
    try:
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise FileProblem(_BAD_LINK)
        return origin(url)
    except ValueError:
        raise FileProblem(_BAD_LINK) from None


def too_big(size: int, max_bytes: int) -> FileProblem:
    return FileProblem(
        f"it is {human_size(size)}, over my {human_size(max_bytes)} limit for a file"
    )


async def fetch(
    ref: FileRef, *, session: aiohttp.ClientSession, max_bytes: int, timeout_s: float
) -> bytes | bytearray:
    """The bytes of ``ref`` (at most ``max_bytes``); raises :class:`FileProblem`."""
    import aiohttp  # already loaded: ``session`` is one

    if ref.unavailable:
        raise FileProblem(ref.unavailable)
    if ref.size is not None and ref.size > max_bytes:
        raise too_big(ref.size, max_bytes)
    try:
        async with asyncio.timeout(timeout_s):
            if ref.path is not None:
                return await asyncio.to_thread(_read_local, Path(ref.path), max_bytes)
            if ref.url is None:
                raise FileProblem("there was no way to download it")
            return await _download(ref, ref.url, session=session, max_bytes=max_bytes)
    except TimeoutError:
        raise FileProblem(f"the download took longer than {timeout_s:g} s") from None
    except aiohttp.ClientError as exc:
        raise FileProblem(f"the download failed ({type(exc).__name__})") from None
    except ValueError:  # aiohttp and yarl refuse some addresses with ValueError
        raise FileProblem(_BAD_LINK) from None


async def _download(
    ref: FileRef, url: str, *, session: aiohttp.ClientSession, max_bytes: int
) -> bytearray:
    headers = {"Authorization": f"Bearer {ref.bearer}"} if ref.bearer else {}
    for _ in range(MAX_REDIRECTS + 1):
        if link_origin(url) not in ref.allowed_origins:
            raise FileProblem("its link is not on the platform's file host, so I did not open it")
        async with session.get(url, headers=headers, allow_redirects=False) as response:
            if response.status in _REDIRECTS and "Location" in response.headers:
                target = urljoin(url, response.headers["Location"])
                if link_origin(target) not in ref.allowed_origins:
                    raise FileProblem("its download led to another site, so I did not follow it")
                url = target
                continue
            if response.status in (401, 403):
                raise FileProblem(f"the platform refused the download ({response.status})")
            if response.status in (404, 410):
                raise FileProblem(f"the platform no longer has it ({response.status})")
            if response.status != 200:
                raise FileProblem(f"the download failed (HTTP {response.status})")
            if response.content_type == "text/html" and not ref.name.lower().endswith(
                (".html", ".htm")
            ):
                raise FileProblem("the platform sent a web page instead of the file (no access)")
            declared = response.content_length
            if declared is not None and declared > max_bytes:
                raise too_big(declared, max_bytes)
            # Sized once when the length is declared (no regrowth, no copy at the end).
            body = bytearray(declared or 0)
            got = 0
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                end = got + len(chunk)
                if end > max_bytes:
                    raise too_big(end, max_bytes)
                body[got:end] = chunk
                got = end
            del body[got:]
            return body
    raise FileProblem("its download was redirected too many times")


def _read_local(path: Path, max_bytes: int) -> bytes:
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise FileProblem("it is a folder, not a file")
        if size > max_bytes:
            raise too_big(size, max_bytes)
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise FileProblem("there is no such file") from None
    except PermissionError:
        raise FileProblem("I am not allowed to read it") from None
    except OSError as exc:
        raise FileProblem(f"it could not be read ({os.strerror(exc.errno or 0)})") from None
    if len(data) > max_bytes:
        raise too_big(len(data), max_bytes)
    return data
