"""Turning a file's bytes into what Claude reads, within the Messages API's limits.

The type comes from the bytes (:func:`sniff`), not from the name or the platform's word:

- images (PNG, JPEG, GIF, WebP) become ``image`` blocks. The API refuses an image
  whose base64 data is over 5 MB or whose sides are over 8000 px (2000 px when a request
  holds more than 20 images) (Anthropic vision docs, "Before you upload"). Such an image is
  not refused here: it is scaled down with Pillow to a long edge of
  :data:`RESIZE_LONG_EDGE` px (the size the API scales larger images to anyway, so nothing
  Claude sees is lost) and re-encoded (PNG, else JPEG when the PNG is still too big). Every
  image is decoded once, so a corrupt one is caught here, not by the API;
- PDFs become ``document`` blocks; the API reads at most :data:`MAX_PDF_PAGES` pages and no
  encrypted PDF (Anthropic PDF support docs): the pages are counted with pypdf, in a child
  process with a deadline (:mod:`core.files.pdf_pages`, ``pdf_timeout_s``): pypdf's repair
  scan of a junk file can run for tens of seconds of CPU, which a thread cannot be stopped
  in; the child is killed at the deadline and the file refused (its bytes then leave the
  turn's memory budget like any refused file's);
- text (plain, Markdown, CSV, JSON, source code, logs: :data:`core.files.refs.TEXT_EXTENSIONS`
  or a ``text/*`` type, and valid UTF-8) becomes a ``document`` block with a text source,
  its name as the title: the file stays apart from the person's words (a file that says
  "ignore your rules" is a document, not the message), and no quoting scheme can be broken
  by its content. Longer than ``max_text_chars``, it is cut at a line end and the person
  is told; only what is kept is decoded.

Memory: an image or a PDF sent as it came keeps the downloaded bytes themselves in its
block, once (base64 is made only as the request is sent, :mod:`core.model.body`); Pillow
reads them through :func:`bytes_file`, not a copy (pypdf reads its copy in the child).

Anything else raises :class:`core.files.fetch.FileProblem` with the reason. CPU-bound:
call :func:`prepare` in a worker thread.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from core.files.fetch import FileProblem
from core.files.refs import IMAGE_TYPES, FileRef
from core.model.body import base64_size
from core.model.claude import FileBlock
from core.rules.text import clean_text

MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
"""The API's limit on one image's base64 data (5 MB)."""
MAX_IMAGE_SIDE = 8000
MAX_IMAGE_SIDE_MANY = 2000
MANY_IMAGES = 20
"""Over this many images in one request, each side must be at most 2000 px."""
MAX_MEDIA = 100
"""At most 100 images (and PDFs) in one request."""
MAX_PDF_PAGES = 100
MAX_REQUEST_BYTES = 32 * 1024 * 1024
"""The Messages API's request size limit (32 MB, standard endpoints)."""
REQUEST_RESERVE_BYTES = 2 * 1024 * 1024
"""Of the 32 MB, this much is kept for the prompt, the history and the JSON around files."""
RESIZE_LONG_EDGE = 1568
"""The API scales an image whose long edge is over 1568 px down to it (vision docs)."""
MAX_DECODE_PIXELS = 50_000_000
"""Images of more pixels are not opened at all (decoding one takes about 4 bytes a pixel)."""
_DECODING = threading.Lock()
"""One image decoded at a time in the process: the byte budget (``SELFMIND_FILE_MEMORY_MB``)
counts a file's bytes, and a 150 KB PNG of 10,000 x 5,000 pixels decodes to about 120 MB, so
decodes in every worker thread at once would not be bounded by it. One at a time they add
at most one image's pixels (4 bytes a pixel, :data:`MAX_DECODE_PIXELS`: 200 MB at worst, a
4K screenshot about 33 MB); a decode takes tens of milliseconds for a screenshot."""

_SNIFF = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff(data: bytes | bytearray) -> str | None:
    """The media type the bytes say they are (the four image types, ``application/pdf``),
    or None."""
    for magic, media_type in _SNIFF:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if b"%PDF-" in data[:1024]:
        return "application/pdf"
    return None


def bytes_file(data: bytes | bytearray) -> io.BufferedReader:
    """A read-only, seekable file over ``data`` that does not copy it (``io.BytesIO`` copies
    a ``bytearray``): what Pillow and pypdf read."""
    return io.BufferedReader(_BytesView(data))


class _BytesView(io.RawIOBase):
    def __init__(self, data: bytes | bytearray) -> None:
        super().__init__()
        self._view = memoryview(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        piece = self._view[self._pos : self._pos + len(buffer)]
        n = len(piece)
        buffer[:n] = piece
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._view.nbytes}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        # pypdf's reader is a reference cycle that keeps its stream until the garbage
        # collector runs: closed, the stream no longer keeps the file's bytes.
        with contextlib.suppress(BufferError):  # a slice still out: dropped with it
            self._view.release()
        super().close()


@dataclass(frozen=True)
class Prepared:
    """A file ready for the request, and a sentence for the person when it was cut."""

    block: FileBlock
    note: str | None = None


PDF_TIMEOUT_S = 10.0
"""A PDF's page count may take this long (``SELFMIND_FILE_PARSE_TIMEOUT_S``): a real PDF of
100 pages counts in well under a second (``bench/pdf_bound.py``)."""


def prepare(
    ref: FileRef,
    data: bytes | bytearray,
    *,
    max_side: int,
    max_text_chars: int,
    pdf_timeout_s: float = PDF_TIMEOUT_S,
) -> Prepared:
    """What Claude reads of ``data`` (the bytes of ``ref``); raises ``FileProblem``."""
    found = sniff(data)
    if found in IMAGE_TYPES:
        return Prepared(_image(ref.name, data, found, max_side=max_side))
    if found == "application/pdf":
        return Prepared(_pdf(ref.name, data, timeout_s=pdf_timeout_s))
    refused = refused_type(ref, data)
    if refused is not None:
        raise FileProblem(refused)
    return _text(ref.name, data, max_chars=max_text_chars)


HEAD_BYTES = 8192
"""How much of a file's start :func:`refused_type` needs (the text check reads as much)."""


def refused_type(ref: FileRef, head: bytes | bytearray) -> str | None:
    """Why a file whose bytes start with ``head`` (its first :data:`HEAD_BYTES`, or all of
    it) is of a kind never read, or None: an image of the four types, a PDF, or text (by its
    extension or declared type, or bytes that look like UTF-8 text). The one rule of
    :func:`prepare`, usable before the whole file is read (the terminal's ``/attach``)."""
    found = sniff(head)
    if found in IMAGE_TYPES or found == "application/pdf":
        return None
    kind = ref.kind
    if kind == "image":
        declared = (ref.media_type or "").split(";")[0].strip().lower()
        if declared.startswith("image/") and declared not in IMAGE_TYPES:
            return "I read PNG, JPEG, GIF and WebP images, not this kind"
        return "it is not a readable image"
    if kind == "pdf":
        return "it is not a readable PDF"
    if kind == "text" or _looks_like_text(head):
        return None
    return "I read images (PNG, JPEG, GIF, WebP), PDFs and text files, not this kind"


def _image(name: str, data: bytes | bytearray, media_type: str, *, max_side: int) -> FileBlock:
    # No warnings.catch_warnings() here: it swaps the process's filters, and this runs in
    # worker threads at once. Pillow warns of images over 89 megapixels (an error where
    # warnings are errors, as in the tests) and refuses those over 179; the check below
    # refuses anything over MAX_DECODE_PIXELS before decoding.
    stream = bytes_file(data)
    try:
        image = Image.open(stream)
        width, height = image.size
        if width * height > MAX_DECODE_PIXELS:
            raise FileProblem(f"it is {width}x{height} pixels, too large to open")
        fits = max(width, height) <= max_side
        with _DECODING:
            if fits and base64_size(len(data)) <= MAX_IMAGE_BASE64_BYTES:
                image.load()  # decoded once: a corrupt image is caught here, not by the API
                image.close()  # its pixels go now, before the next decode
                return FileBlock("image", name, media_type, data)
            return _smaller(name, image, len(data), max_side=min(max_side, RESIZE_LONG_EDGE))
    except FileProblem:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise FileProblem("it is not a readable image") from exc
    except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
        raise FileProblem("it is too large in pixels to open") from exc
    except Warning as exc:  # any other warning raised as an error: not readable
        raise FileProblem("it is not a readable image") from exc
    finally:
        stream.close()


def _smaller(name: str, image: Image.Image, size: int, *, max_side: int) -> FileBlock:
    """``image`` (opened, not yet decoded: a JPEG is then decoded at a reduced scale)
    scaled to fit ``max_side`` px and re-encoded under 5 MB: as PNG when that can fit (a
    PNG shrinks with its pixels), else as JPEG (quality 85)."""
    if getattr(image, "n_frames", 1) > 1:
        image.seek(0)  # an animation: its first frame
    pixels = image.width * image.height
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    alpha = _has_alpha(image)
    scaled = image.convert("RGBA" if alpha else "RGB")
    estimate = size * scaled.width * scaled.height / pixels
    if image.format == "PNG" and base64_size(int(estimate)) <= MAX_IMAGE_BASE64_BYTES * 0.9:
        out = io.BytesIO()
        scaled.save(out, format="PNG")
        if base64_size(out.tell()) <= MAX_IMAGE_BASE64_BYTES:
            return FileBlock("image", name, "image/png", out.getvalue())
    flat = Image.new("RGB", scaled.size, "white")
    flat.paste(scaled, mask=scaled.getchannel("A") if alpha else None)
    out = io.BytesIO()
    flat.save(out, format="JPEG", quality=85)
    return FileBlock("image", name, "image/jpeg", out.getvalue())


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info


_PDF_PAGES = str(Path(__file__).with_name("pdf_pages.py"))


def pdf_pages(data: bytes | bytearray, *, timeout_s: float) -> int:
    """The page count of the PDF ``data``, by pypdf in a child process
    (:mod:`core.files.pdf_pages`) killed after ``timeout_s`` seconds; raises
    ``FileProblem`` for a PDF that is encrypted, not readable, or not read in time."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", _PDF_PAGES, f"{timeout_s:g}"],
            input=data,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise FileProblem(f"it took over {timeout_s:g} s to read, so I stopped") from None
    except OSError as exc:  # no process could be started (out of memory, of processes)
        raise FileProblem(f"it could not be read ({type(exc).__name__})") from None
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # its CPU cap: same deadline
        raise FileProblem(f"it took over {timeout_s:g} s to read, so I stopped")
    try:
        result = json.loads(done.stdout)
    except ValueError:  # killed by its memory cap, or died: unreadable as far as we know
        raise FileProblem("it is not a readable PDF") from None
    if not isinstance(result, dict) or "pages" not in result:
        raise FileProblem("it is not a readable PDF")
    if result.get("encrypted"):
        raise FileProblem("it is password-protected")
    return int(result["pages"])


def _pdf(name: str, data: bytes | bytearray, *, timeout_s: float) -> FileBlock:
    pages = pdf_pages(data, timeout_s=timeout_s)
    if pages == 0:
        raise FileProblem("it is not a readable PDF (no pages)")
    if pages > MAX_PDF_PAGES:
        raise FileProblem(f"it has {pages} pages, over the {MAX_PDF_PAGES} Claude reads at once")
    return FileBlock("pdf", name, "application/pdf", data)


def _looks_like_text(data: bytes | bytearray) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut at the end of the sample
    return True


def _text(name: str, data: bytes | bytearray, *, max_chars: int) -> Prepared:
    decoded, whole = _decode_head(data, max_chars=max_chars)
    text = clean_text(decoded, keep_newlines=True)
    note = None
    if len(text) > max_chars or not whole:
        cut = text.rfind("\n", 0, max_chars)
        text = text[: cut if cut > max_chars // 2 else max_chars]
        note = f"I read only the first {len(text):,} characters of {name}."
    if not text.strip():
        raise FileProblem("it is empty")
    return Prepared(FileBlock("text", name, "text/plain", text), note)


TEXT_CHUNK_BYTES = 64 * 1024


def _decode_head(data: bytes | bytearray, *, max_chars: int) -> tuple[str, bool]:
    """The UTF-8 text of ``data`` (a BOM dropped) up to a little over ``max_chars``
    characters, decoded piece by piece: a 20 MB log cut to 200,000 characters decodes about
    that much, not 20 MB. ``True`` with it when that is the whole file. ``FileProblem``
    for binary data (a NUL) or bytes that are not UTF-8 in the part read."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    view = memoryview(data)
    pieces: list[str] = []
    chars = 0
    start = 0
    try:
        while start < view.nbytes and chars <= max_chars:
            piece = view[start : start + TEXT_CHUNK_BYTES]
            if data.find(b"\x00", start, start + piece.nbytes) >= 0:
                raise FileProblem("it is not a text file I can read (binary data)")
            start += piece.nbytes
            text = decoder.decode(piece, final=start >= view.nbytes)
            pieces.append(text)
            chars += len(text)
    except UnicodeDecodeError:
        raise FileProblem("it is not UTF-8 text") from None
    return "".join(pieces), start >= view.nbytes
