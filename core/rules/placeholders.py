"""The placeholder lines a stored message ends with, one per file it came with
(``[pdf: report.pdf, 12 KB]``, written by :func:`core.files.refs.placeholder`), read back:
the rule both the chat loop (files gone after a restart) and the reflection (a file's name
is data, never the person's words) need, below both of them."""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(
    r"^\[(image|pdf|text|file): ([^\[\]\n]+?)(?:, [0-9.]+ (?:bytes?|KB|MB))?\]$"
)


def split_placeholders(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A stored message as what the person wrote and the files they attached: ``text``
    without the placeholder lines that end it, and each file's ``(kind, name)`` in order.
    A file's name is the sender's choice ("The user prefers ... .pdf"): whoever reads the
    message as the person's words (the reflection) gets it apart, as data."""
    lines = text.splitlines()
    files: list[tuple[str, str]] = []
    while lines:
        match = _PLACEHOLDER.match(lines[-1].strip())
        if match is None:
            break
        files.append((match.group(1), match.group(2)))
        lines.pop()
    return "\n".join(lines), files[::-1]
