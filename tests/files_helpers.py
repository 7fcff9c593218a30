"""Files for tests of file reading: real PNG, JPEG, GIF, WebP and PDF bytes, each carrying a
marker string inside (a PNG text chunk, the PDF's metadata) to grep for afterwards."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from pathlib import Path

from PIL import Image, PngImagePlugin
from pypdf import PdfWriter


def png(width: int = 64, height: int = 48, *, marker: str = "", noise: bool = False) -> bytes:
    """A PNG; ``marker`` in a tEXt chunk; ``noise`` makes it incompressible."""
    if noise:
        image = Image.frombytes("RGB", (width, height), random.randbytes(width * height * 3))
    else:
        image = Image.new("RGB", (width, height), (200, 30, 90))
    info = PngImagePlugin.PngInfo()
    if marker:
        info.add_text("Comment", marker)
    out = io.BytesIO()
    image.save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def image_bytes(fmt: str, width: int = 40, height: int = 30) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, format=fmt)
    return out.getvalue()


def pdf(
    pages: int = 2, *, marker: str = "", pad_bytes: int = 0, password: str | None = None
) -> bytes:
    """A PDF of blank pages; ``marker`` in its metadata (stored as plain text);
    ``pad_bytes`` of incompressible metadata make it that much bigger."""
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    meta = {"/Title": "test"}
    if marker:
        meta["/Subject"] = marker
    if pad_bytes:
        meta["/Keywords"] = random.randbytes(pad_bytes // 2).hex()
    writer.add_metadata(meta)
    if password:
        writer.encrypt(password)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def store_files(db: Path) -> list[Path]:
    """The database file and its -wal and -shm companions that exist."""
    return [p for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]


def grep_store(db: Path, needle: bytes) -> list[str]:
    """The store files (database, -wal, -shm) that contain ``needle``."""
    return [p.name for p in store_files(db) if needle in p.read_bytes()]


def junk_pdf(size_bytes: int) -> bytes:
    """A "PDF" that sends pypdf's repair into a long scan: objects opened and never closed,
    and a ``startxref`` that points nowhere (about 0.4 s of CPU per MB here;
    bench/pdf_bound.py times it)."""
    return _filled(size_bytes, lambda i: b"%d 0 obj\n<<" % i)


def _filled(size_bytes: int, unit: Callable[[int], bytes]) -> bytes:
    """``%PDF-1.4``, ``unit(0)``, ``unit(1)``... to about ``size_bytes``, a dead
    ``startxref``."""
    parts, total, i = [b"%PDF-1.4\n"], 9, 0
    while total < size_bytes:
        parts.append(unit(i))
        total += len(parts[-1])
        i += 1
    return b"".join(parts) + b"\nstartxref\n123456789\n%%EOF\n"


def chain_pdf(size_bytes: int) -> bytes:
    """Objects that name each other and no xref (a dead ``startxref``): pypdf's repair
    parses each of them."""
    return _filled(size_bytes, lambda i: b"%d 0 obj\n<< /Kids [%d 0 R] >>\nendobj\n" % (i, i + 1))
