"""Split a Markdown answer into chat messages that fit a platform's length limit.

Pure functions, no I/O; :mod:`core.streaming.reply` uses them to roll a streamed reply over into a
new message, and :func:`chunk_markdown` splits a finished text in one go.

Lengths are Python ``str`` lengths (code points). Platform limits:

- Discord: 2,000 characters of message content
  (https://discord.com/developers/docs/resources/message#create-message).
- Slack: ``chat.update`` fails with ``msg_too_long`` well below the documented 40,000
  characters (reports cluster near 4,000), so replies roll over at about 3,500
  (https://api.slack.com/methods/chat.update).

Splitting rules: a message never exceeds ``max_chars``, counting the ``reserve`` the caller
keeps for a "still writing" marker and the fence lines added here. A message that ends inside
a fenced code block gets a closing fence; the next one reopens it with the same opening line
(so the same language tag). A cut prefers a paragraph boundary, then a line boundary, then a
word boundary, each only if it keeps the message at least half full; otherwise it cuts hard,
never inside a fence line, never where the rest of the line would read as a fence line in the
next message, and never between the code points of one emoji or accented letter.
The bodies of the messages, concatenated, equal the text exactly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "START",
    "Chunk",
    "Fence",
    "Position",
    "Split",
    "chunk_markdown",
    "closing_suffix",
    "fence_at_end",
    "locate",
    "reopen_prefix",
    "slack_markdown",
    "split_message",
]

# A fence line: optional indentation, three or more backticks or tildes, then an info string.
# Indentation is not limited to three spaces: Claude indents fences inside list items.
_FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})([^\n]*)")
# Where a word-boundary cut may follow: whitespace, and CJK punctuation (no spaces in CJK).
_WORD_BREAKS = frozenset(" \t、。，．！？；：")
# A GFM table delimiter row: | --- | :---: | (at least one pipe between columns).
_TABLE_DELIMITER = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*")
_MAX_GRAPHEME_BACKOFF = 32


@dataclass(frozen=True, slots=True)
class Fence:
    """An open fenced code block.

    ``opening`` is its first line without indentation (e.g. ``"```python"``), ``char`` is
    ``"`"`` or ``"~"``, ``length`` the number of fence characters (3 or more).
    """

    opening: str
    char: str
    length: int

    @property
    def closing(self) -> str:
        """The shortest line that closes this block, e.g. ``"```"``."""
        return self.char * self.length

    @property
    def language(self) -> str:
        """The language tag of the opening line (``""`` if none)."""
        info = self.opening[self.length :].split()
        return info[0] if info else ""


@dataclass(frozen=True, slots=True)
class Position:
    """An offset into the answer with the Markdown state needed to start a message there.

    ``fence`` is the code block open at ``pos``; ``line_start`` is the offset of the line
    holding ``pos`` and ``line_fence`` the code block open at ``line_start`` (scanning resumes
    there, so a message that starts mid-line still sees whole lines).
    """

    pos: int
    fence: Fence | None
    line_start: int
    line_fence: Fence | None


START = Position(0, None, 0, None)


@dataclass(frozen=True, slots=True)
class Split:
    """Where a message must end: ``cut`` starts the next one, ``suffix`` closes this one."""

    cut: Position
    suffix: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One message of a split text: ``prefix + body + suffix``.

    ``body`` is ``text[start:start + len(body)]``; ``prefix`` reopens a code block (``""`` or
    an opening fence line plus newline) and ``suffix`` closes one (``""`` or a fence).
    """

    prefix: str
    body: str
    suffix: str
    start: int

    @property
    def text(self) -> str:
        """The message as posted."""
        return self.prefix + self.body + self.suffix


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int  # after the newline, or len(text) for a last line without one
    before: Fence | None
    after: Fence | None
    fence_line: bool


def _step(line: str, fence: Fence | None) -> tuple[Fence | None, bool]:
    """The code block open after ``line`` (no newline), and whether it is a fence line."""
    match = _FENCE_LINE.fullmatch(line.rstrip("\r"))
    if match is None:
        return fence, False
    marker, info = match.group(1), match.group(2)
    if fence is None:
        if marker[0] == "`" and "`" in info:
            return None, False  # inline code such as ```a``` is not a fence
        return Fence(line.strip(), marker[0], len(marker)), True
    if marker[0] == fence.char and len(marker) >= fence.length and not info.strip():
        return None, True
    return fence, False


def _lines(text: str, start: int, fence: Fence | None, stop: int) -> Iterator[_Line]:
    """The lines of ``text`` from line start ``start`` while they begin before ``stop``."""
    pos = start
    while pos < len(text) and pos < stop:
        newline = text.find("\n", pos)
        end = len(text) if newline == -1 else newline + 1
        after, fence_line = _step(text[pos : end - (newline != -1)], fence)
        yield _Line(pos, end, fence, after, fence_line)
        fence, pos = after, end


def _close(fence: Fence | None, max_chars: int) -> str:
    # An absurdly long fence is not reproduced: the message then carries no framing.
    if fence is None or len(fence.closing) > max_chars // 8:
        return ""
    return fence.closing


def reopen_prefix(fence: Fence | None, max_chars: int) -> str:
    """The line that starts a message inside ``fence``: its opening line and a newline.

    ``""`` outside a code block. An opening line longer than ``max_chars // 4`` is shortened to
    the bare fence (the language tag is lost rather than the limit broken).
    """
    if not _close(fence, max_chars):
        return ""
    assert fence is not None
    opening = fence.opening if len(fence.opening) <= max_chars // 4 else fence.closing
    return opening + "\n"


def closing_suffix(fence: Fence | None, *, after_newline: bool, max_chars: int) -> str:
    """What closes ``fence`` at the end of a message: ``""``, ``"```"`` or ``"\\n```"``."""
    closing = _close(fence, max_chars)
    if not closing or after_newline:
        return closing
    return "\n" + closing


def fence_at_end(text: str, start: Position) -> Fence | None:
    """The code block still open at the end of ``text`` (scanning from ``start``).

    A last line without a newline counts as a whole line, as at the end of a document.
    """
    fence = start.line_fence
    for line in _lines(text, start.line_start, start.line_fence, len(text)):
        fence = line.after
    return fence


def locate(text: str, start: Position, pos: int) -> Position:
    """The :class:`Position` of offset ``pos`` (``start.pos <= pos <= len(text)``).

    Mid-line (also at the end of an unfinished last line) the state is the one at the start of
    the line: a fence line takes effect only once complete, and the line is rescanned whole
    when the text grows. Raises ``ValueError`` for ``pos`` out of range.
    """
    if not start.pos <= pos <= len(text):
        raise ValueError(f"pos {pos} outside {start.pos}..{len(text)}")
    line_start, line_fence = start.line_start, start.line_fence
    for line in _lines(text, start.line_start, start.line_fence, pos + 1):
        if pos < line.end or (pos == line.end and text[pos - 1] != "\n"):
            return Position(pos, line.before, line.start, line.before)
        line_start, line_fence = line.end, line.after
    return Position(pos, line_fence, line_start, line_fence)


def _no_break_before(text: str, pos: int) -> bool:
    """True if a cut at ``pos`` would split one user-perceived character."""
    char, prev = text[pos], text[pos - 1]
    code = ord(char)
    if prev == "\u200d" or (prev == "\r" and char == "\n"):
        return True
    if char in "\u200d\ufe0e\ufe0f" or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F:
        return True  # joiner, variation selector, skin tone, tag sequence
    if unicodedata.category(char) in ("Mn", "Me", "Mc"):
        return True  # combining mark
    if 0x1F1E6 <= code <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF:
        run = 0  # regional indicators pair up into flags: count the run before pos
        while pos - run - 1 >= 0 and 0x1F1E6 <= ord(text[pos - run - 1]) <= 0x1F1FF:
            run += 1
        return run % 2 == 1
    return False


def _starts_fence(text: str, pos: int, line: _Line) -> bool:
    """True if a mid-line cut at ``pos`` would make the rest of the line a fence line.

    The next message begins with that rest, so a chat renders it as a line of its own: after
    ``aaa```x`` a cut before the backticks would open (or close) a code block there.
    """
    rest = text[pos : line.end].rstrip("\n")
    return _step(rest, line.before)[1]


def _grapheme_safe(text: str, pos: int, low: int) -> int:
    """``pos`` moved back (not below ``low``) so that it does not split a character."""
    cut = pos
    while cut > low and pos - cut < _MAX_GRAPHEME_BACKOFF and _no_break_before(text, cut):
        cut -= 1
    return pos if _no_break_before(text, cut) else cut


def split_message(text: str, start: Position, max_chars: int, *, reserve: int = 0) -> Split | None:
    """Where the message beginning at ``start`` must end, or None if the rest fits.

    The rest fits when ``prefix + text[start.pos:] + closing fence (if one is open) + reserve``
    is at most ``max_chars``. Otherwise the returned cut ``c`` gives a message
    ``prefix + text[start.pos:c.pos] + suffix`` of at most ``max_chars - reserve`` characters,
    with ``c.pos > start.pos``. Raises ``ValueError`` if ``max_chars - reserve < 32`` or
    ``reserve > max_chars // 2``.
    """
    _check_limits(max_chars, reserve)
    prefix = reopen_prefix(start.fence, max_chars)
    budget = max_chars - reserve - len(prefix)
    rest = len(text) - start.pos
    if rest <= budget:
        after_newline = (prefix + text[start.pos :]).endswith("\n")
        tail = closing_suffix(
            fence_at_end(text, start), after_newline=after_newline, max_chars=max_chars
        )
        if rest + len(tail) <= budget:
            return None
    return _find_cut(text, start, budget, max_chars)


def _find_cut(text: str, start: Position, budget: int, max_chars: int) -> Split:
    limit = start.pos + budget  # the message body plus its suffix must end by here
    half = start.pos + budget // 2
    best: dict[str, Split] = {}  # kind -> the latest cut of that kind

    def offer(kind: str, pos: int, fence: Fence | None, line: _Line) -> None:
        suffix = closing_suffix(fence, after_newline=text[pos - 1] == "\n", max_chars=max_chars)
        if pos + len(suffix) <= limit:
            line_start, line_fence = (pos, fence) if pos == line.end else (line.start, line.before)
            best[kind] = Split(Position(pos, fence, line_start, line_fence), suffix)

    for line in _lines(text, start.line_start, start.line_fence, limit + 1):
        if line.end <= start.pos:
            continue
        opens = line.fence_line and line.before is None
        if line.end <= limit and text[line.end - 1] == "\n" and not opens:
            # A cut right after an opening fence would leave an empty code block.
            offer("line", line.end, line.after, line)
            blank = not text[line.start : line.end].strip()
            if blank and line.start > start.pos:
                offer("paragraph", line.end, line.after, line)
        if line.fence_line:
            continue  # never cut inside a fence line
        low = max(line.start, start.pos) + 1
        mid_suffix = closing_suffix(line.before, after_newline=False, max_chars=max_chars)
        high = min(line.end - 1, limit - len(mid_suffix))
        for pos in range(high, low - 1, -1):
            if text[pos - 1] in _WORD_BREAKS and not _starts_fence(text, pos, line):
                offer("word", pos, line.before, line)
                break
        hard = high
        while hard >= low:
            hard = _grapheme_safe(text, hard, low)
            if not _starts_fence(text, hard, line):
                offer("hard", hard, line.before, line)
                break
            hard -= 1

    for kind in ("paragraph", "line", "word"):
        if kind in best and best[kind].cut.pos >= half:
            return best[kind]
    if "hard" in best:
        return best["hard"]
    if best:  # e.g. the window ends inside a fence line: take the latest boundary before it
        return max(best.values(), key=lambda split: split.cut.pos)
    # A single fence line longer than the budget: cut it, without framing.
    return Split(locate(text, start, start.pos + max(1, budget)), "")


def _check_limits(max_chars: int, reserve: int) -> None:
    if reserve < 0 or reserve > max_chars // 2 or max_chars - reserve < 32:
        raise ValueError(
            f"max_chars={max_chars} reserve={reserve}: need 0 <= reserve <= max_chars // 2 "
            "and max_chars - reserve >= 32"
        )


def chunk_markdown(text: str, max_chars: int, *, reserve: int = 0) -> list[Chunk]:
    """Split ``text`` into messages of at most ``max_chars - reserve`` characters.

    Returns at least one chunk; ``"".join(c.body for c in chunks) == text``. The last chunk
    gets no closing fence (the text's own state is kept). Raises ``ValueError`` for limits
    :func:`split_message` refuses.
    """
    chunks: list[Chunk] = []
    start = START
    while True:
        prefix = reopen_prefix(start.fence, max_chars)
        split = split_message(text, start, max_chars, reserve=reserve)
        if split is None:
            chunks.append(Chunk(prefix, text[start.pos :], "", start.pos))
            return chunks
        chunks.append(Chunk(prefix, text[start.pos : split.cut.pos], split.suffix, start.pos))
        start = split.cut


def _table_starts(lines: list[str], index: int) -> bool:
    line = lines[index].strip()
    if "|" not in line or index + 1 >= len(lines):
        return False
    following = lines[index + 1].strip()
    if _TABLE_DELIMITER.fullmatch(following):
        return True
    # A table continued from the previous message has no header: two |-framed rows.
    framed = line.startswith("|") and line.endswith("|") and len(line) > 1
    return framed and following.startswith("|") and following.endswith("|") and len(following) > 1


def slack_markdown(text: str) -> str:
    """Markdown for Slack's ``markdown_text``: pipe tables are put in a code block.

    Slack renders standard Markdown sent as ``markdown_text`` (slack_sdk >= 3.37; never with
    ``text`` or ``blocks``), except tables (https://api.slack.com/reference/block-kit/blocks
    #markdown). A table is a run of non-blank lines holding ``|`` that starts with a header
    row and a delimiter row (``| --- | --- |``), or with two ``|``-framed rows (a table
    continued from the previous message). Tables inside code blocks are left alone; all other
    text passes through unchanged. Adds 8 characters per table.
    """
    lines = text.split("\n")
    out: list[str] = []
    fence: Fence | None = None
    index = 0
    while index < len(lines):
        if fence is None and _table_starts(lines, index):
            end = index
            while end < len(lines) and "|" in lines[end] and lines[end].strip():
                end += 1
            out.extend(["```", *lines[index:end], "```"])
            index = end
            continue
        fence, _ = _step(lines[index], fence)
        out.append(lines[index])
        index += 1
    return "\n".join(out)
