"""The fake Anthropic API's rules for files in messages: what the real Messages API refuses,
and what files cost in input tokens.

Refused with 400 ``invalid_request_error``, as the API documents (vision docs "Before you
upload"; PDF support docs "PDF support requirements"):

- an ``image`` block whose source is not base64 of PNG, JPEG, GIF or WebP, whose bytes do not
  match its ``media_type``, that cannot be decoded, whose base64 ``data`` is over 5 MB, or
  whose width or height is over 8000 px (2000 px when the request holds more than 20
  images); more than 100 images and PDFs in one request;
- a ``document`` block that is not a base64 PDF or a ``text/plain`` text source; a PDF
  that is not readable, encrypted, or of more than 100 pages; a ``title`` or a ``context``
  that is not a string (or null); citations enabled on some documents of a request but not
  all (citations docs: "citations must be enabled on all or none of the documents within a
  request").

A body over 32 MB is refused with 413 ``request_too_large`` (API overview, request size
limits) before anything else is read.

Tokens (the fake's own, deterministic, growing with size): an image costs
``ceil(width * height / 750)`` (the vision docs' estimate) after the API's own scaling to a
long edge of at most 1568 px; a PDF 1,500 tokens a page plus one per 1,000 bytes; a text
document ``ceil(len(text) / 4)`` like any text.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from PIL import Image
from pypdf import PdfReader

MAX_REQUEST_BYTES = 32 * 1024 * 1024
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
MAX_SIDE, MAX_SIDE_MANY, MANY, MAX_MEDIA, MAX_PAGES = 8000, 2000, 20, 100, 100
IMAGE_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WEBP"}
PDF_PAGE_TOKENS = 1500


class FileRefused(Exception):
    """The API's 400 message for a file block."""


def blocks(body: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, block)`` for each content block of each message."""
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for j, block in enumerate(content):
                if isinstance(block, dict):
                    yield f"messages.{i}.content.{j}", block


def check_files(body: Mapping[str, Any]) -> str | None:
    """The first reason the API would refuse the files of ``body``, or None."""
    images = [(w, b) for w, b in blocks(body) if b.get("type") == "image"]
    documents = [(w, b) for w, b in blocks(body) if b.get("type") == "document"]
    if len(images) + len(documents) > MAX_MEDIA:
        return f"Too many images and documents: at most {MAX_MEDIA} per request"
    max_side = MAX_SIDE_MANY if len(images) > MANY else MAX_SIDE
    cited = {_cited(block) for _, block in documents}
    if len(cited) > 1:
        return "citations must be enabled on all or none of the documents in a request"
    try:
        for where, block in images:
            _image_size(where, block, max_side=max_side)
        for where, block in documents:
            _document_tokens(where, block)
    except FileRefused as refused:
        return str(refused)
    return None


def file_tokens(body: Mapping[str, Any]) -> int:
    """Input tokens the files of ``body`` cost (call after :func:`check_files`)."""
    total = 0
    for where, block in blocks(body):
        if block.get("type") == "image":
            width, height = _image_size(where, block, max_side=MAX_SIDE)
            scale = min(1.0, 1568 / max(width, height))
            total += math.ceil((width * scale) * (height * scale) / 750)
        elif block.get("type") == "document":
            total += _document_tokens(where, block)
    return total


def _decoded(where: str, source: Any) -> bytes:
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise FileRefused(f"{where}.source: only base64 sources are accepted here")
    data = source.get("data")
    if not isinstance(data, str):
        raise FileRefused(f"{where}.source.data: Field required")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise FileRefused(f"{where}.source.data: invalid base64 data") from None


def _image_size(where: str, block: dict[str, Any], *, max_side: int) -> tuple[int, int]:
    source = block.get("source")
    raw = _decoded(where, source)
    media_type = source.get("media_type")
    if media_type not in IMAGE_TYPES:
        raise FileRefused(f"{where}.source.media_type: Input should be one of {list(IMAGE_TYPES)}")
    if len(source["data"]) > MAX_IMAGE_BASE64:
        raise FileRefused(f"{where}: image exceeds 5 MB maximum: {len(source['data'])} bytes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            image = Image.open(io.BytesIO(raw))
            image.load()
        except Exception:
            raise FileRefused(f"{where}: Could not process image") from None
    if image.format != IMAGE_TYPES[media_type]:
        raise FileRefused(f"{where}: Image does not match the provided media type {media_type}")
    width, height = image.size
    if max(width, height) > max_side:
        raise FileRefused(f"{where}: image dimensions exceed max allowed size: {max_side} pixels")
    return width, height


def _cited(block: dict[str, Any]) -> bool:
    citations = block.get("citations")
    return isinstance(citations, dict) and citations.get("enabled") is True


def _document_tokens(where: str, block: dict[str, Any]) -> int:
    for key in ("title", "context"):
        if block.get(key) is not None and not isinstance(block[key], str):
            raise FileRefused(f"{where}.{key}: Input should be a valid string")
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text":
        data = source.get("data")
        if source.get("media_type") != "text/plain" or not isinstance(data, str):
            raise FileRefused(f"{where}.source: a text source needs media_type text/plain and data")
        return (len(data) + 3) // 4
    if not isinstance(source, dict) or source.get("media_type") != "application/pdf":
        raise FileRefused(f"{where}.source.media_type: Input should be 'application/pdf'")
    raw = _decoded(where, source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            reader = PdfReader(io.BytesIO(raw))
            encrypted = reader.is_encrypted
            pages = 0 if encrypted else len(reader.pages)
        except Exception:
            raise FileRefused(f"{where}: The PDF specified was not valid.") from None
    if encrypted:
        raise FileRefused(f"{where}: The PDF specified is password-protected.")
    if pages > MAX_PAGES:
        raise FileRefused(f"{where}: A maximum of {MAX_PAGES} PDF pages may be provided.")
    return pages * PDF_PAGE_TOKENS + len(raw) // 1000
