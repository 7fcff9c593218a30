"""The terminal chat's words: memory commands, chat messages, and the plain (scripted) screen.

:class:`TerminalChat` handles one input (a line, or a multi-line message typed or pasted in
a terminal) and says what happened through a :class:`Screen`. :class:`PlainScreen` is the
screen when standard input is not a terminal: plain text, answers written as their deltas
arrive, no ANSI; :mod:`bots.terminal.tty` is the interactive one.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Protocol, TextIO

from bots.terminal.history import forget_in_file
from core.chat.intake import Intake
from core.chat.loop import IncomingMessage, TurnLoop
from core.errors import MemoryInputError, MemoryNotFound, ModelError, SelfMindError
from core.files import FileReader, FileRef, placeholder
from core.files.prepare import HEAD_BYTES, refused_type
from core.memory import replies
from core.memory.profile import listed_text
from core.memory.reflection import ReflectionResult
from core.memory.service import MemoryService, parse_memory_id
from core.rules.text import clean_text
from core.types import Place, Turn, utcnow

HELP = (
    "Commands: /remember TEXT, /forget ID, /forget all, /memories [QUERY], /stats, "
    "/memory pause|resume|off|on (pause: I use what I know but learn nothing new; off: "
    "neither), "
    "/attach PATH (a file for your next message; repeat it for more: images, PDFs, text "
    "files, read for that answer and never kept), /help, /quit. Anything else is a message "
    "for Claude."
)
TERMINAL = Place(platform="cli", kind="dm")
"""The terminal is its owner's DM with the bot (every memory of theirs is used there)."""
ATTACH_USAGE = "Usage: /attach PATH (repeat it to send several files with your next message)"
WHERE = "a private terminal chat"


def cut_note(text: str, *, failed: bool = False) -> str:
    """The line above the answer to a message answered at the next start: one a crash cut,
    or (``failed``) one whose answer failed, or was stopped, before any of it showed; the
    message on one line (control characters dropped), at most 60 characters."""
    line = textwrap.shorten(clean_text(text, keep_newlines=False), width=60, placeholder="…")
    why = "which got no answer" if failed else "cut off by a crash"
    return f"(answering your last message, {why}: {line})"


def no_key() -> str:
    """What a chat message gets without an Anthropic key: where to set it, and that the
    / commands work without one."""
    from core.settings import missing

    why = missing("ANTHROPIC_API_KEY", "your Anthropic API key")
    return f"Chat needs an API key: {why}. /commands work now."


def plain(text: str) -> str:
    """A chat reply written for Slack and Discord (inline code in backticks) as plain text."""
    return text.replace("`", "")


def count(n: int, one: str, many: str) -> str:
    """``1 memory``, ``2 memories``, ``0 memories``."""
    return f"{n} {one if n == 1 else many}"


class Screen(Protocol):
    """Where the chat's words go (plain text for scripts, or an interactive terminal)."""

    @property
    def help_extra(self) -> str:
        """Extra lines for ``/help`` (keys, files), or ""."""
        ...

    def say(self, text: str) -> None:
        """One line (or block) of plain text, shown as is."""
        ...

    async def note(self, text: str) -> None:
        """A line from a background task (reflection), shown without breaking the input."""
        ...

    async def answer(self, deltas: AsyncIterator[str]) -> None:
        """Show one answer from its text deltas. Raises what iterating ``deltas`` raises,
        except what the screen shows itself (see each screen)."""
        ...

    async def confirm(self, question: str) -> bool:
        """Ask a yes/no question; True only for an explicit yes."""
        ...

    async def forget_history(self, *, texts: Sequence[str] | None = None) -> None:
        """Remove from the saved input history the entries carrying ``texts`` (``/forget
        ID``), or all of it (None: ``/forget all``)."""
        ...


class PlainScreen:
    """Plain text for pipes and scripts: what ``selfmind chat`` always printed.

    Answers are written delta by delta; a ``ModelError`` ends the answer with
    ``[its user_message]`` on a line of its own. ``confirm`` answers yes without asking (a
    script that says ``/forget all`` means it). Nothing is added to the input history, but
    a forget reaches the user's history file ``history`` (the interactive chat's).
    """

    def __init__(self, out: TextIO, history: Path | None = None) -> None:
        self.out = out
        self.history = history

    @property
    def help_extra(self) -> str:
        return ""

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def note(self, text: str) -> None:
        self.say(text)

    async def answer(self, deltas: AsyncIterator[str]) -> None:
        wrote = False
        try:
            async for delta in deltas:
                self.out.write(delta)
                self.out.flush()
                wrote = True
        except ModelError as exc:
            if wrote:
                self.out.write("\n")
            self.say(f"[{exc.user_message}]")
            return
        self.out.write("\n" if wrote else "")
        self.out.flush()

    async def confirm(self, question: str) -> bool:
        return True

    async def forget_history(self, *, texts: Sequence[str] | None = None) -> None:
        if self.history is not None:
            await asyncio.to_thread(forget_in_file, self.history, texts)


class _ScreenPlace:
    """The terminal's :class:`core.chat.intake.ReplyPlace`: a new process cannot reach what
    a dead one wrote, so nothing is reused; the answer is written below."""

    def __init__(self, chat: TerminalChat) -> None:
        self.chat = chat

    async def shown_reply(self) -> list[str]:
        return []

    async def show(self, deltas: AsyncIterator[str], *, reuse: Sequence[str]) -> None:
        await self.chat.screen.answer(self.chat._watched(deltas))

    async def say(self, text: str) -> None:
        self.chat.screen.say(text)


class TerminalChat:
    """One terminal session of one user (memory key ``cli:NAME``, origin ``private``)."""

    def __init__(
        self,
        service: MemoryService,
        *,
        user_key: str,
        screen: Screen,
        loop: TurnLoop | None = None,
        session: str | None = None,
        files: FileReader | None = None,
    ) -> None:
        self.service = service
        self.files = files
        """The limits ``/attach`` checks at once (default: the chat loop's reader's)."""
        self.user_key = user_key
        self.screen = screen
        self.loop = loop
        self.conversation_key = f"{user_key}:terminal:{session or 'default'}"
        self.intake = Intake(loop=loop) if loop is not None else None
        """The core's intake: here only its start-up recovery (:meth:`cut_lines`)."""
        self.messages = 0
        self.unanswered = 0
        """Chat messages sent, and those that got no whole answer (no key, a failure, a
        daily cap): a piped ``selfmind chat`` exits 1 when any did."""
        self.last_failure: str | None = None
        self.attached: list[FileRef] = []
        """Files ``/attach`` named for the next message (read then, by :mod:`core.files`)."""

    @property
    def help(self) -> str:
        extra = self.screen.help_extra
        return HELP + (f"\n{extra}" if extra else "")

    async def handle(self, text: str) -> bool:
        """Handle one input (a line, or a multi-line message); False means quit."""
        text = text.strip()
        if not text:
            return True
        if text.startswith("/"):
            return await self.command(text)
        await self.message(text)
        return True

    async def message(self, text: str) -> None:
        """A chat message: run the turn loop and show the answer as it streams."""
        self.messages += 1
        if self.loop is None:
            said = no_key()
            self.screen.say(said)
            self._unanswered(said)
            return
        files, self.attached = tuple(self.attached), []
        message = IncomingMessage(
            user_key=self.user_key,
            conversation_key=self.conversation_key,
            text=text,
            origin="private",
            sent_at=utcnow(),
            where=WHERE,
            files=files,
            place=TERMINAL,
        )
        await self.screen.answer(self._watched(self.loop.answer(message)))

    async def cut_lines(self) -> list[Turn]:
        """This conversation's stored lines with no answer within
        ``core.chat.intake.RECOVERY_WINDOW``, oldest first, as Slack and Discord find theirs
        (``Intake.unanswered``): one a crash left (the process was killed while the answer
        streamed: still ``answering``), and one whose answer failed, or was stopped, before
        any of it showed (``off``; a cut answer is stored, so not asked again). Ask before
        reflections resume (``ChatRuntime.start``); answer them with :meth:`recover`."""
        if self.intake is None:
            return []
        turns = await self.intake.unanswered(conversation_prefix=self.conversation_key)
        return [
            t
            for t in turns
            if t.conversation_key == self.conversation_key and t.user_key == self.user_key
        ]

    async def recover(self, turns: Sequence[Turn]) -> None:
        """Answer each of ``turns`` (from :meth:`cut_lines`) once, under :func:`cut_note`:
        claimed by the core's intake (``Intake.recovered``: one live process, a recovery
        that dies is recovered at the next start) and stored as its stream ends, before its
        last character is written (``Intake.respond(store_at_end=True)``, :meth:`_watched`),
        then reflected; an answer that fails is never reflected (and is asked again at the
        next start within the window, as on Slack and Discord). An error is said, as for a
        typed message, and the next turn is answered all the same."""
        if self.intake is None:
            return
        for turn in turns:
            received = await self.intake.recovered(turn, flight_key=f"terminal:{turn.id}")
            if received is None:
                continue
            incoming = IncomingMessage(
                user_key=self.user_key,
                conversation_key=self.conversation_key,
                text=turn.text,
                origin="private",
                sent_at=turn.sent_at,
                where=WHERE,
                place=TERMINAL,
            )
            self.messages += 1
            self.screen.say(cut_note(turn.text, failed=turn.reflection != "answering"))
            try:
                await self.intake.respond(incoming, received, _ScreenPlace(self), store_at_end=True)
            except SelfMindError as exc:
                self.screen.say(f"Error: {exc}")

    async def _watched(self, deltas: AsyncIterator[str]) -> AsyncIterator[str]:
        """``deltas`` with the answer's last character held back until they end, noting a
        failure (the screen shows it) as an unanswered message.

        ``deltas`` end once the turn loop stored the answer (``TurnLoop.answer`` without a
        delivery; ``Intake.respond(store_at_end=True)``), so a kill never leaves the whole
        answer on screen and unstored (the next start would write it a second time): before
        the store the screen shows it cut, and the next start answers it below; in the
        instant between the store and the last write, the screen lacks that one character
        (the store has it whole)."""
        held = ""
        try:
            async for delta in deltas:
                if not delta:
                    continue
                shown, held = held + delta[:-1], delta[-1]
                if shown:
                    yield shown
        except SelfMindError as exc:
            self._unanswered(exc.user_message)
            if held:  # what the loop stored as shown: shown before the failure's note
                yield held
            raise
        if held:
            yield held

    def _unanswered(self, why: str) -> None:
        self.unanswered += 1
        self.last_failure = why

    def attach(self, arg: str) -> None:
        """``/attach PATH``: one more file for the next message (``/attach`` alone lists
        them). The file is read, checked and sent only with that message."""
        path = arg.strip().strip("\"'")
        if not path:
            names = ", ".join(f.name for f in self.attached)
            self.screen.say(f"Attached for your next message: {names}." if names else ATTACH_USAGE)
            return
        local = Path(path).expanduser()
        if not local.is_file():
            self.screen.say(f"No such file: {path}")
            return
        ref = FileRef(local.name, size=local.stat().st_size, path=str(local.resolve()))
        try:
            with local.open("rb") as f:
                head = f.read(HEAD_BYTES)
        except OSError as exc:
            self.screen.say(f"Not attached: {ref.name}: it could not be read ({exc.strerror}).")
            return
        reader = self.files or (self.loop.files if self.loop is not None else None)
        refused = (
            reader.refusal(ref, head, attached=len(self.attached))
            if reader is not None
            else refused_type(ref, head)
        )
        if refused is not None:  # it would never be sent: said now, not with the message
            self.screen.say(f"Not attached: {ref.name}: {refused}.")
            return
        self.attached.append(ref)
        self.screen.say(f"Attached {placeholder(ref)}; it goes with your next message.")

    async def learned(self, result: ReflectionResult) -> None:
        """Reflection callback: a short note of what was remembered."""
        for memory in result.added:
            await self.screen.note(f"(remembered #{memory.id}: {memory.text})")

    async def command(self, line: str) -> bool:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        say = self.screen.say
        try:
            match name.lower():
                case "/quit" | "/exit":
                    return False
                case "/help":
                    say(self.help)
                case "/remember":
                    result = await self.service.remember(
                        user_key=self.user_key, text=arg, place=TERMINAL
                    )
                    say(replies.remembered(result, code=str))
                case "/forget":
                    await self.forget(arg)
                case "/memories":
                    await self.memories(arg)
                case "/memory":
                    await self.memory_mode(arg)
                case "/attach":
                    self.attach(arg)
                case "/stats":
                    stats = await self.service.stats(user_key=self.user_key)
                    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items()))
                    total = count(stats.total, "memory", "memories")
                    say(total + (f" ({kinds})" if kinds else ""))
                case _:
                    say(f"Unknown command {name}. {HELP}")
        except (MemoryInputError, MemoryNotFound) as exc:
            say(replies.error_sentence(exc))
        return True

    async def forget(self, arg: str) -> None:
        if arg.lower() == "all":
            total = (await self.service.stats(user_key=self.user_key)).total
            question = replies.forget_all_question(total, also="your input history")
            if not await self.screen.confirm(question):
                self.screen.say(replies.KEPT_ALL)
                return
            forgotten = await self.service.forget_all(user_key=self.user_key)
            await self.screen.forget_history()
            self.screen.say(replies.forgot_all(forgotten))
            return
        if not arg.strip().removeprefix("#").isdigit():
            self.screen.say("Usage: /forget ID (a number from /memories) or /forget all")
            return
        memory = await self.service.forget(user_key=self.user_key, memory_id=parse_memory_id(arg))
        await self.screen.forget_history(texts=[memory.text])
        self.screen.say(replies.forgot(memory.id, code=str))

    async def memory_mode(self, arg: str) -> None:
        """``/memory pause | resume | off | on`` as in Slack and Discord (the same words and
        answers, :data:`core.memory.replies.MODE_WORDS`); ``/memory`` alone says the mode."""
        word = arg.strip().lower()
        if not word:
            current = await self.service.get_mode(user_key=self.user_key)
            self.screen.say(plain(f"{replies.MODE_REPLIES[current]} {replies.MEMORY_USAGE}"))
            return
        mode = replies.MODE_WORDS.get(word)
        if mode is None:
            self.screen.say(plain(replies.MEMORY_USAGE))
            return
        await self.service.set_mode(user_key=self.user_key, mode=mode)
        self.screen.say(plain(replies.MODE_REPLIES[mode]))

    async def memories(self, query: str) -> None:
        if query:
            found = await self.service.search(user_key=self.user_key, query=query, k=10)
            rows = [f.memory for f in found]
        else:
            rows = await self.service.list_memories(user_key=self.user_key, limit=50)
        if not rows:
            self.screen.say(replies.NO_MATCH if query else replies.NO_MEMORIES_YET)
        for m in rows:
            self.screen.say(f"#{m.id} {listed_text(m)}")


async def read_line(stream: TextIO, prompt: str | None, out: TextIO) -> str | None:
    """The next line, or None at end of input; reading happens off the event loop."""
    if prompt:
        out.write(prompt)
        out.flush()
    line = await asyncio.to_thread(stream.readline)
    return line if line else None
