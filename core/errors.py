"""One exception tree for SelfMind.

::

    SelfMindError
    ├── ConfigError          a setting is missing or wrong (names the variable)
    ├── StoreError           the memory store failed or holds data it cannot read
    │   ├── MigrationError   a numbered migration failed; the file is left as it was
    │   ├── SchemaBehindError    the store needs ``selfmind db migrate``; nothing changed
    │   └── NewerSchemaError     a newer SelfMind wrote the store; nothing changed
    ├── IntakeFailed         a platform message could not be stored: do not acknowledge it
    ├── MemoryInputError     user input cannot become a memory (empty, too long, bad JSON line)
    │   ├── ImportFormatError    an import file line is malformed (``line`` is its number)
    │   └── SecretInMemory       the text carries a secret (``kind``); secrets never become memories
    ├── MemoryNotFound       no such memory for this user (also: another user's id)
    │   └── StaleButton      a button names a memory that is not the one it was made for
    ├── RateLimited          a reply sink call got HTTP 429; ``retry_after_s`` says how long
    ├── EditFailed           a reply message cannot be edited any more (too long, deleted)
    ├── StreamingRefused     the platform refuses native streaming here: fall back to edits
    ├── LimitReached         a daily cap on messages or tokens is reached (says when it resets)
    ├── PlanNotPending       a cleanup plan is gone, someone else's, or outdated; nothing changed
    └── ModelError           Claude could not answer; ``user_message`` is short and true
        ├── StreamCutError   the answer stream ended before ``message_stop``
        └── MalformedOutput  a structured-output reply was not the promised JSON

Adapters catch ``SelfMindError`` at their edge and show ``str(error)`` (or
``ModelError.user_message``) to the user; anything else is logged with
``logger.exception`` and answered with a generic line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal


class SelfMindError(Exception):
    """Base of every error SelfMind raises on purpose.

    ``user_message`` is what a chat user may be shown (``str(error)`` unless a subclass says
    something shorter).
    """

    @property
    def user_message(self) -> str:
        return str(self)


class ConfigError(SelfMindError):
    """A setting is missing or invalid; the message names the variable."""


class StoreError(SelfMindError):
    """The memory store failed."""


class MigrationError(StoreError):
    """A numbered migration failed and was rolled back."""


class SchemaBehindError(StoreError):
    """The store lacks migrations this version knows and the command may not apply them
    (only ``selfmind db migrate`` and the bots' start do); nothing was changed."""


class NewerSchemaError(StoreError):
    """The store holds a migration this version does not know: a newer SelfMind wrote it.
    Every command refuses it; nothing was changed."""


class IntakeFailed(SelfMindError):
    """A platform message (event, command) could not be stored (disk full, database
    locked past its busy timeout, any store error): the adapter must not tell the platform
    it was delivered. Slack then redelivers the event; where a platform cannot (Discord, a
    slash command) the user is shown :data:`NOT_SAVED`. The cause is ``__cause__``."""

    @property
    def user_message(self) -> str:
        return NOT_SAVED


NOT_SAVED = "Sorry, I could not save that message, so I did not read it; please send it again."
"""The one sentence a user sees when their message could not be stored."""

NOT_SAVED_COMMAND = "Sorry, that was not saved (my storage failed); please try again."
"""The one sentence a user sees when a command could not store what it was asked to."""


def storage_failed(error: BaseException) -> bool:
    """True when ``error`` is the store failing rather than a bug or bad input:
    ``StoreError``, ``IntakeFailed``, an ``OSError`` (disk full, permissions), or a driver
    error (``sqlite3.Error``: "database or disk is full", "database is locked";
    ``asyncpg.PostgresError`` / ``InterfaceError``), told apart by module so that this module
    imports no driver."""
    if isinstance(error, StoreError | IntakeFailed | OSError):
        return True
    module = type(error).__module__
    return module == "sqlite3" or module.startswith(("asyncpg", "aiosqlite"))


class MemoryInputError(SelfMindError):
    """Text or a file cannot become a memory; the message says why."""


class ImportFormatError(MemoryInputError):
    """A line of a JSON Lines import is malformed (or, ``secret``, carries a secret); nothing
    was imported. ``problems`` is every bad line of the file as ``(line, reason, secret)``,
    in order (one import run names them all); ``line`` and ``secret`` are the first's.
    ``str()`` is ``line N: reason`` for one, and a count then one ``line N: reason`` line
    each for several."""

    def __init__(
        self,
        line: int,
        reason: str,
        *,
        secret: bool = False,
        problems: Sequence[tuple[int, str, bool]] = (),
    ) -> None:
        found = tuple(problems) or ((line, reason, secret),)
        if len(found) == 1:
            message = f"line {line}: {reason}"
        else:
            message = f"{len(found)} lines cannot be imported, so nothing was:" + "".join(
                f"\n  line {n}: {why}" for n, why, _ in found
            )
        super().__init__(message)
        self.line = line
        self.secret = secret
        self.problems = found

    @classmethod
    def of(cls, problems: Sequence[ImportFormatError]) -> ImportFormatError:
        """One error naming every line of ``problems`` (each one line's error, in order)."""
        first = problems[0]
        return cls(
            first.line,
            first.reason,
            secret=first.secret,
            problems=[(p.line, p.reason, p.secret) for p in problems],
        )

    @property
    def reason(self) -> str:
        """The first bad line's reason, without its ``line N:``."""
        return self.problems[0][1]


class SecretInMemory(MemoryInputError):
    """The text carries a secret (:func:`core.rules.secrets.find_secrets`), so it is not stored.
    The message is one sentence naming the kind (``kind``, a key of
    :data:`core.rules.secrets.KINDS`), never the secret."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class MemoryNotFound(SelfMindError):
    """The memory id does not exist for this user (it may belong to someone else)."""

    def __init__(self, memory_id: int, message: str = "no such memory") -> None:
        super().__init__(message)
        self.memory_id = memory_id


class StaleButton(MemoryNotFound):
    """A button's memory reference is out of date (:mod:`core.memory.refs`): an old-format
    value, or its id now names another memory. Nothing was changed; ``str()`` says so."""


class ModelError(SelfMindError):
    """Claude could not produce an answer.

    ``user_message`` is one short, true sentence for the chat.
    """

    def __init__(self, message: str, *, user_message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self._user_message = user_message
        self.retryable = retryable
        """False when asking again cannot help (a refused key, 400, 403, 404): reflection
        gives up at once instead of spending its attempts."""

    @property
    def user_message(self) -> str:
        return self._user_message


class StreamCutError(ModelError):
    """The answer stream stopped before ``message_stop``; ``partial`` holds the text so far."""

    def __init__(self, partial: str) -> None:
        super().__init__(
            "answer stream ended before message_stop",
            user_message="The answer was cut off before it finished.",
        )
        self.partial = partial


class MalformedOutput(ModelError):
    """A structured-output (extraction) reply was not valid JSON for the requested schema.

    ``reason`` says what was wrong (JSON syntax or the failed validation), never the text.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"structured output was not the promised JSON: {reason}",
            user_message="Claude's answer was not in the expected format.",
        )
        self.reason = reason


class RateLimited(SelfMindError):
    """A reply sink call was refused for now (HTTP 429); retry after ``retry_after_s`` seconds.

    Sinks raise it from ``post``/``edit`` with the platform's ``Retry-After`` (Slack) or
    ``retry_after`` (Discord) value; :mod:`core.streaming.reply` waits and continues.
    """

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"rate limited by the chat platform; retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


class EditFailed(SelfMindError):
    """A reply message cannot be edited any more (e.g. Slack ``msg_too_long``, deleted).

    Raised by sinks from ``edit``; :mod:`core.streaming.reply` posts the rest as a new message.
    ``reason`` is the platform's error code or a short phrase.
    """

    def __init__(self, reason: str = "edit failed") -> None:
        super().__init__(f"message edit failed: {reason}")
        self.reason = reason


class StreamingRefused(SelfMindError):
    """The platform refuses its native streaming methods for this reply (an old workspace,
    a missing scope, a channel type, a full message); :mod:`core.streaming.native` continues
    the answer by edits. ``reason`` is the platform's error code."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"native streaming refused: {reason}")
        self.reason = reason


class LimitReached(SelfMindError):
    """A daily cap is reached; no Claude call is made. The message says when it resets."""


class PlanNotPending(SelfMindError):
    """A cleanup plan shown in a chat cannot be applied (:mod:`core.memory.cleanup_review`); nothing
    was changed. ``reason``: ``"gone"`` (expired, applied or cancelled), ``"not_yours"``
    (another user's plan) or ``"changed"`` (the memories changed since it was made)."""

    def __init__(self, message: str, *, reason: Literal["gone", "not_yours", "changed"]) -> None:
        super().__init__(message)
        self.reason = reason
