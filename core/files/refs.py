"""What the core knows of a file before reading it, and the placeholder stored instead of it.

An adapter turns each file of a platform message into a :class:`FileRef` (its name, the
size and media type the platform declares, and where to fetch it); the core reads it for
one turn only (:mod:`core.files.reader`). What is stored, and so what history, recovery and
reflection see, is the message text followed by one placeholder line per file
(:func:`placeholder`): ``[image: screenshot.png, 142 KB]``. The bytes never are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from core.rules.placeholders import split_placeholders
from core.rules.text import clean_text

FileKind = Literal["image", "pdf", "text", "file"]

MAX_NAME_CHARS = 120
"""File names are cut to this many characters in placeholders and sentences."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image media types the Messages API reads (Anthropic vision docs)."""

TEXT_EXTENSIONS = frozenset(
    """txt text md markdown rst csv tsv json jsonl ndjson yaml yml toml ini cfg conf env log
    xml html htm css scss js mjs cjs ts tsx jsx py pyi rb go rs java kt kts scala c h cc cpp
    hpp cs swift m mm php pl pm r sql sh bash zsh fish ps1 bat lua dart ex exs erl hs ml clj
    vue svelte tf hcl proto graphql gradle properties diff patch tex srt vtt""".split()
)
"""Extensions read as text (with a UTF-8 check): plain text, Markdown, CSV, JSON, source
code, configuration and logs."""

_IMAGE_EXTENSIONS = frozenset({"png", "jpg", "jpeg", "gif", "webp"})


@dataclass(frozen=True)
class FileRef:
    """One file of a message, not yet read.

    ``size``: the bytes the platform declares (None when unknown); ``media_type``: the
    declared type (``image/png``...), None when unknown. Exactly one way to fetch it:
    ``url`` (HTTP(S); ``bearer`` sent as ``Authorization: Bearer`` to it, and the download,
    redirects included, may only reach ``allowed_origins``, ``scheme://host:port`` strings)
    or ``path`` (a local file: the terminal). ``unavailable``: the platform gave no way to
    fetch it; the end of a sentence saying why (``"Slack did not share it with me"``).
    """

    name: str
    size: int | None = None
    media_type: str | None = None
    url: str | None = None
    bearer: str | None = field(default=None, repr=False)
    allowed_origins: frozenset[str] = frozenset()
    path: str | None = None
    unavailable: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", display_name(self.name))

    @property
    def kind(self) -> FileKind:
        """What the file looks like from its declared type and extension."""
        return kind_of(self.name, self.media_type)


def display_name(name: str) -> str:
    """``name`` safe for a placeholder line: one line, no brackets, at most
    :data:`MAX_NAME_CHARS` characters; ``"file"`` when nothing is left."""
    cleaned = clean_text(name, keep_newlines=False).replace("[", "(").replace("]", ")")
    cleaned = " ".join(cleaned.split())[:MAX_NAME_CHARS]
    return cleaned or "file"


def extension(name: str) -> str:
    """The lower-case extension of ``name`` without the dot ("" when none)."""
    return PurePosixPath(name).suffix.lower().lstrip(".")


def kind_of(name: str, media_type: str | None) -> FileKind:
    """``image``, ``pdf``, ``text`` or ``file``, from a declared media type and a name."""
    declared = (media_type or "").split(";")[0].strip().lower()
    ext = extension(name)
    if declared in IMAGE_TYPES or (not declared and ext in _IMAGE_EXTENSIONS):
        return "image"
    if declared == "application/pdf" or ext == "pdf":
        return "pdf"
    if declared.startswith("text/") or declared == "application/json" or ext in TEXT_EXTENSIONS:
        return "text"
    if declared.startswith("image/") or ext in _IMAGE_EXTENSIONS:
        return "image"
    return "file"


def human_size(size: int) -> str:
    """``512 bytes``, ``142 KB``, ``3.4 MB`` (1 KB = 1,024 bytes)."""
    if size < 1024:
        return f"{size} bytes" if size != 1 else "1 byte"
    if size < 1024 * 1024:
        return f"{round(size / 1024)} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def placeholder(ref: FileRef) -> str:
    """The line stored instead of the file: ``[image: screenshot.png, 142 KB]``."""
    size = f", {human_size(ref.size)}" if ref.size is not None else ""
    return f"[{ref.kind}: {ref.name}{size}]"


def with_placeholders(text: str, files: Sequence[FileRef]) -> str:
    """``text`` and one placeholder line per file (what the store keeps)."""
    lines = [placeholder(f) for f in files]
    return "\n".join([text, *lines] if text else lines)


def placeholder_names(text: str) -> list[str]:
    """The file names of the placeholder lines that end ``text`` (a stored message), in
    order; empty when it ends with none."""
    return [name for _, name in split_placeholders(text)[1]]
