"""The words every adapter shows for the memory commands: one source for Slack, Discord and
the terminal, which keep only their formatting (Block Kit, Discord content and views, plain
text).

A memory id is shown through ``code``: Markdown code (the default, ```#12```, which both Slack
mrkdwn and Discord render) or ``str`` for plain text (the terminal). Commands::

    remember TEXT     remembered()
    forget ID         forgot(), or error_sentence(MemoryNotFound)
    forget all        forget_all_question(), then forgot_all() or KEPT_ALL; a replayed or
                      second click answers core.memory.service.CONFIRM_GONE
    list              list_header(), NO_MEMORIES_YET, NO_MORE_ON_PAGE
    search QUERY      SEARCH_HEADER, NO_MATCH, SEARCH_USAGE
    export            exported(), NO_EXPORT
    memory MODE       MODE_REPLIES[mode], MEMORY_USAGE
"""

from __future__ import annotations

from collections.abc import Callable

from core.errors import NOT_SAVED_COMMAND, SelfMindError, storage_failed
from core.types import AddResult, MemoryMode

Code = Callable[[str], str]


def markdown_code(text: str) -> str:
    """``text`` as Markdown inline code (Slack mrkdwn and Discord alike)."""
    return f"`{text}`"


def _memories(count: int) -> str:
    return f"{count} {'memory' if count == 1 else 'memories'}"


def remembered(
    result: AddResult, *, code: Code = markdown_code, escape: Callable[[str], str] = str
) -> str:
    """``Remembered (`#12`): The user prefers tabs over spaces.`` (the text as stored, when
    the result carries it, through the platform's ``escape``, so a stored ``<!channel>`` or
    ``**bold**`` shows as typed), followed by ``It replaces `#7`.`` when it superseded a less
    specific memory; for a duplicate, ``I already knew that (`#12`).``; then, when a secret
    was left out of it, ``(A password was left out: secrets are never stored as
    memories.)``"""
    ref = code(f"#{result.id}")
    if result.status != "added":
        said = f"I already knew that ({ref})."
    else:
        said = (
            f"Remembered ({ref}): {escape(result.text)}" if result.text else f"Remembered ({ref})."
        )
        if result.superseded:
            said += f" It replaces {', '.join(code(f'#{i}') for i in result.superseded)}."
    if result.left_out:
        name = result.left_out[0].upper() + result.left_out[1:]
        said += f" ({name} was left out: secrets are never stored as memories.)"
    return said


def forgot(memory_id: int, *, code: Code = markdown_code) -> str:
    """``Forgot `#12`.``"""
    return f"Forgot {code(f'#{memory_id}')}."


FORGET_USAGE = "Usage: `/forget ID` (a number from `/memories`) or `/forget all`."
FORGET_ALL_BUTTON = "Forget everything"
CANCEL_BUTTON = "Cancel"
KEPT_ALL = "Nothing was forgotten."


def forget_all_question(count: int, *, also: str = "") -> str:
    """The confirmation ``/forget all`` asks first; ``also`` names what else goes."""
    more = f", {also}" if also else ""
    return (
        f"Forget all {_memories(count)}{more} and our conversation history? This cannot be undone."
    )


HOME_CONFIRM_GONE = (
    "That button was already used or this page was out of date; nothing was forgotten. "
    "Press *Forget everything* again on this page."
)
"""A memory page's *Forget everything* click whose token was used, replaced or expired."""


def forgot_all(count: int) -> str:
    """The answer once everything is forgotten."""
    return f"Forgot all {_memories(count)} and our conversation history."


NO_MEMORIES_YET = "I don't remember anything about you yet."
NO_MORE_ON_PAGE = "No more memories on this page."
SEARCH_HEADER = "Your memories that match, best first:"
SEARCH_USAGE = "Usage: `/memories search QUERY`."
NO_MATCH = "None of your memories match."
NO_EXPORT = "You have no memories to export."


def list_header(*, first: int, last: int, total: int) -> str:
    """``Your memories, newest first (1–10 of 42):``"""
    return f"Your memories, newest first ({first}–{last} of {total}):"


def your_key(user_key: str, *, code: Code = markdown_code) -> str:
    """The person's own memory key, shown with ``/memories`` so they can name it to an
    operator (``selfmind memories --user KEY``, ``selfmind users``)."""
    return f"Your memory key is {code(user_key)}."


def export_sent(count: int) -> str:
    """The answer once the export file is in the person's DM."""
    return f"I sent your {_memories(count)} to our DM as a JSON Lines file."


def exported(count: int) -> str:
    """What accompanies an export file."""
    return (
        f"Your {_memories(count)}, one JSON object a line "
        "(`selfmind memories import` reads this file)."
    )


MODE_WORDS: dict[str, MemoryMode] = {"pause": "paused", "resume": "on", "off": "off", "on": "on"}
"""The words of ``/memory pause | resume | off | on`` and the mode each sets."""
MODE_REPLIES: dict[MemoryMode, str] = {
    "on": "Memory is on: I use what I know about you and learn from our conversations.",
    "paused": (
        "Memory is paused: I still use what I know about you but learn nothing new. "
        "`/memory resume` undoes it."
    ),
    "off": (
        "Memory is off: I neither use nor learn anything about you (nothing is deleted). "
        "`/memory on` undoes it."
    ),
}
"""What ``/memory`` answers once a mode is set (or to say the current one)."""
MEMORY_USAGE = "Usage: `/memory pause | resume | off | on`."


def tidied(count: int, *, command: bool = True, dated: int = 0) -> str:
    """What ``/memory`` and the Home tab say after a night's consolidation took ``count``
    memories out of recall (merged, superseded or retired; ``dated`` of them facts given
    their end date or told as past): "Tidied 3 memories last night (2 of them dated facts
    given their end) — `/memory undo` puts them back." (``command`` False: the Home tab's
    button does)."""
    them = "it" if count == 1 else "them"
    undo = f" — `/memory undo` puts {them} back." if command else "."
    if dated:
        n = min(dated, count)
        of = {1: "a dated fact given its end"}.get(count) or (
            "one of them a dated fact given its end"
            if n == 1
            else f"{n} of them dated facts given their end"
        )
        return f"Tidied {_memories(count)} last night ({of}){undo}"
    return f"Tidied {_memories(count)} last night{undo}"


def tidy_undone(restored: int | None) -> str:
    """The answer to ``/memory undo``: what came back (None: nothing to undo)."""
    if restored is None:
        return "Nothing was tidied last night, so there is nothing to undo."
    were = "it was" if restored == 1 else "they were"
    return f"Put back {_memories(restored)} as {were} before last night's tidy."


SOMETHING_WRONG = "Something went wrong on my side; please try again."


def sentence(message: str) -> str:
    """``message`` as a sentence: capitalised, ending with a full stop."""
    message = message.strip()
    return message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")


def error_sentence(exc: BaseException) -> str:
    """What to tell the user when a memory command failed: the store could not save
    (:data:`core.errors.NOT_SAVED_COMMAND`), our own short and true message for a
    :class:`core.errors.SelfMindError` (``a memory needs some text`` -> ``A memory needs some
    text.``), else :data:`SOMETHING_WRONG` (the adapter logs it)."""
    if storage_failed(exc):
        return NOT_SAVED_COMMAND
    if isinstance(exc, SelfMindError):
        return sentence(str(exc))
    return SOMETHING_WRONG
