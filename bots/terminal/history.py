"""The terminal's input history: one file per user, and what forgetting removes from it.

``selfmind chat --user NAME`` keeps what NAME typed (Up/Down) in its own file,
:func:`history_file`: ``history/{name}`` in the terminal's folder (:func:`terminal_folder`:
the SQLite database's folder, or ``~/.selfmind`` for PostgreSQL), the folder 0700 and the
file 0600, in prompt_toolkit's ``FileHistory`` format (``# time`` then ``+line`` per line).

Forgetting reaches it, for that user only:

- ``/forget ID`` in the chat and ``selfmind memories forget ID`` remove every entry that
  holds the forgotten memory's text (:func:`carries`: compared case- and
  space-insensitively), and every ``/remember TEXT`` entry whose TEXT ``/remember`` would
  store as that memory, whatever its wording ("/remember my bike is a red Brompton" for
  "The user's bike is a red Brompton.", :func:`core.memory.service.remembered_text`); a
  memory learned by reflection is reworded from the message by Claude, so the message's
  entry is not found that way (``/forget all`` is);
- ``/forget all`` and ``selfmind memories forget --all`` remove the user's file.

A file is rewritten in place (removed bytes overwritten with zeros before the file is cut
or unlinked), never through a copy that could keep another mode. The one file earlier
versions shared between every ``--user`` (``chat_history``) cannot be split by user: it is
removed wherever it is found (the chat's start, any forget). Imports no prompt_toolkit, so
the CLI's ``memories forget`` can use it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Iterator, Sequence
from datetime import date
from pathlib import Path

from core.errors import MemoryInputError
from core.memory.service import remembered_text
from core.rules.text import clean_text, normalize
from core.store.database import database

HISTORY_DIR = "history"
"""The folder of the per-user history files, inside :func:`terminal_folder`."""
LEGACY_FILE = "chat_history"
"""The one history file every user shared before (removed when found)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

logger = logging.getLogger(__name__)


def terminal_folder(db_url: str) -> Path:
    """Where the terminal keeps its files: the SQLite database's folder, or ``~/.selfmind``
    for PostgreSQL (:meth:`core.store.database.Database.local_folder`)."""
    return database(db_url).local_folder()


def history_file(folder: Path, user_key: str) -> Path:
    """The input history of ``user_key``: ``{folder}/history/{readable}-{hash}``, the key's
    safe characters (cut at 60) and 12 hex digits of its SHA-256, so two keys never share
    a file (``cli:a/b`` and ``cli:a_b`` read alike)."""
    readable = _UNSAFE.sub("_", user_key)[:60].strip("._") or "user"
    digest = hashlib.sha256(user_key.encode("utf-8")).hexdigest()[:12]
    return folder / HISTORY_DIR / f"{readable}-{digest}"


def prepare_history(path: Path) -> None:
    """Create the history folder (0700) and ``path`` (0600; made so if it was not), and
    remove the shared file of earlier versions. Raises ``OSError``."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    private_file(path)
    drop_legacy(path.parent.parent)


def private_file(path: Path) -> None:
    """Create ``path`` if missing and make it readable by its owner only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def carries(entry: str, texts: Sequence[str]) -> bool:
    """Whether the history ``entry`` holds one of the memory ``texts`` (normalised: case,
    spacing and control characters aside; :func:`core.rules.text.normalize`), or is the
    ``/remember`` that stored one of them in other words."""
    flat = normalize(clean_text(entry, keep_newlines=False))
    needles = [n for n in (normalize(t) for t in texts) if n]
    if any(needle in flat for needle in needles):
        return True
    command, _, typed = clean_text(entry, keep_newlines=False).partition(" ")
    if command.lower() != "/remember" or not typed.strip():
        return False
    try:  # as said with no date, and as said today (relative dates written out)
        stored = {normalize(remembered_text(typed, today=day)) for day in (None, date.today())}
    except MemoryInputError:  # too long, a supposition or a secret: nothing was stored
        return False
    return any(text in needles for text in stored)


def _entries(data: str) -> list[tuple[list[str], list[str]]]:
    """The file as entries: each its lines before (``# time``, blank) and its ``+`` lines,
    read as prompt_toolkit's ``FileHistory.load_history_strings`` reads them."""
    entries: list[tuple[list[str], list[str]]] = []
    before: list[str] = []
    lines: list[str] = []
    for line in data.splitlines(keepends=True):
        if line.startswith("+"):
            lines.append(line)
            continue
        if lines:
            entries.append((before, lines))
            before, lines = [], []
        before.append(line)
    entries.append((before, lines))
    return entries


def _text(lines: list[str]) -> str:
    return "".join(line[1:] for line in lines).removesuffix("\n")


def remove_entries(path: Path, texts: Sequence[str]) -> int:
    """Remove from the history file ``path`` every entry that :func:`carries` one of
    ``texts``; returns how many went. A missing file has none."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return 0
    with os.fdopen(fd, "r+b") as file:
        old = file.read()
        kept, removed = [], 0
        for before, lines in _entries(old.decode("utf-8", errors="replace")):
            if lines and carries(_text(lines), texts):
                removed += 1
            else:
                kept.append("".join(before + lines))
        if removed:
            new = "".join(kept).encode("utf-8")
            file.seek(0)
            file.write(new + b"\0" * (len(old) - len(new)))  # the removed bytes overwritten
            file.flush()
            os.fsync(file.fileno())
            file.truncate(len(new))
        os.fchmod(file.fileno(), 0o600)
    return removed


def drop_file(path: Path) -> bool:
    """Overwrite the file ``path`` with zeros and remove it; False when there was none."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "r+b") as file:
        size = os.fstat(file.fileno()).st_size
        file.write(b"\0" * size)
        file.flush()
        os.fsync(file.fileno())
    path.unlink()
    return True


def drop_legacy(folder: Path) -> bool:
    """Remove the history file earlier versions shared between users, if it is in
    ``folder`` (a folder there, not a file, is left alone)."""
    legacy = folder / LEGACY_FILE
    if not legacy.is_file() or legacy.is_symlink():
        return False
    return drop_file(legacy)


def forget_in_file(path: Path, texts: Sequence[str] | None) -> int:
    """What a forget does to the history file ``path`` (:func:`history_file`): with
    ``texts`` (``/forget ID``), remove the entries that carry them (returns how many);
    ``None`` (``/forget all``), remove the file (returns 1 if there was one). The shared
    file of earlier versions goes either way; no other user's file is touched."""
    drop_legacy(path.parent.parent)
    if texts is None:
        return int(drop_file(path))
    return remove_entries(path, texts)


def forget_in_history(db_url: str, user_key: str, texts: Sequence[str] | None) -> int:
    """:func:`forget_in_file` on the history of ``user_key`` for the store at ``db_url``
    (``selfmind memories forget``)."""
    return forget_in_file(history_file(terminal_folder(db_url), user_key), texts)


@contextlib.contextmanager
def sole_chat(folder: Path, user_key: str) -> Iterator[bool]:
    """Hold, while inside, an exclusive lock (``flock``) on ``{history file}.lock``: yields
    True when no other live chat of ``user_key`` on this machine holds it, False when one
    does (then a line still unanswered may be that chat's, answering now: not this one's
    to recover). The lock outlives no process (the OS drops it with the process). Yields
    True when it cannot be taken (no ``fcntl``, the folder not writable; logged)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    history = history_file(folder, user_key)
    path = history.with_name(history.name + ".lock")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        logger.warning("no chat lock (%s): %s", path, exc.strerror)
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
