"""The interactive terminal: prompt_toolkit for input, rich for the streamed answer.

- Input (prompt_toolkit): line editing, Up/Down through a history file, Enter sends,
  Esc+Enter (what Alt+Enter sends) adds a line, a bracketed paste is one message however
  many lines it has, Ctrl-C clears the line, Ctrl-D (on an empty line) leaves.
- Output (rich): the answer streams through :func:`core.streaming.reply.stream_reply` into a
  :class:`LiveSink`: a spinner while recall and the first token are pending, then the text
  rendered as Markdown and re-rendered at most every
  :data:`bots.terminal.platform.EDIT_INTERVAL_S`, with a
  spinner under it until the answer is whole.
- Ctrl-C during an answer stops it: the pending step of the turn loop is cancelled, so the
  loop stores what was shown, marked as stopped (:data:`core.chat.loop.STOPPED_MARK`), and
  never reflects on it (as for any answer not delivered); with nothing shown, no answer is
  stored and the line is asked again at the next start (:meth:`TerminalChat.cut_lines`).
  The screen ends the answer with a visible note (:data:`STOPPED`).
- Files (:class:`ChatFiles`), both created 0600 in a 0700 folder: the input history (one
  file per user, which forgetting reaches: :mod:`bots.terminal.history`) and the log.
  While the chat runs every log record goes to the log file, never to the screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import create_output
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from bots.terminal.chat import TerminalChat
from bots.terminal.history import (
    carries,
    forget_in_file,
    history_file,
    prepare_history,
    private_file,
    sole_chat,
    terminal_folder,
)
from bots.terminal.platform import stream_config
from core.errors import SelfMindError
from core.model.claude import ClaudeChatModel
from core.rules.secrets import redact_secrets
from core.runtime import ChatRuntime, open_runtime
from core.settings import Settings
from core.streaming.reply import stream_reply

logger = logging.getLogger(__name__)

#: How an answer streams here (:func:`bots.terminal.platform.stream_config`).
TERMINAL_STREAM = stream_config()
STOPPED = "Stopped (Ctrl-C)."
LOG_FILE = "chat.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The log file rolls over at this size, keeping one older file (``chat.log.1``).
LOG_MAX_BYTES = 5_000_000


class AnswerStopped(SelfMindError):
    """The user stopped the answer (Ctrl-C); ``str()`` is the note shown after it."""


# --- files


@dataclass(frozen=True)
class ChatFiles:
    """The terminal's own files: ``history``, the user's input lines
    (:mod:`bots.terminal.history`: one file per user), and ``log``, in ``folder``: the SQLite
    database's folder (``~/.selfmind`` by default), or ``~/.selfmind`` for PostgreSQL."""

    folder: Path
    history: Path
    log: Path

    @classmethod
    def for_db(cls, db_url: str, user_key: str) -> ChatFiles:
        folder = terminal_folder(db_url)
        return cls(folder, history_file(folder, user_key), folder / LOG_FILE)

    def prepare(self) -> None:
        """Create the folders (0700 when new; the history's always) and both files, 0600
        (made 0600 if they were not); remove the history file earlier versions shared
        between users. Raises ``OSError`` (read-only or full disk, no permission)."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        prepare_history(self.history)
        private_file(self.log)


class PrivateHistory(FileHistory):
    """prompt_toolkit's file history, kept 0600, that ``forget()`` reaches (file and the
    entries loaded for Up/Down). A line is written to the file with its secrets redacted
    (:func:`core.rules.secrets.redact_secrets`); this session's Up still finds it whole."""

    def store_string(self, string: str) -> None:
        private_file(Path(os.fsdecode(self.filename)))
        super().store_string(redact_secrets(string))

    def forget(self, texts: Sequence[str] | None = None) -> None:
        """Remove the entries carrying ``texts`` (:func:`bots.terminal.history.carries`), or
        with None the whole file; Up finds none of them after."""
        forget_in_file(Path(os.fsdecode(self.filename)), texts)
        if texts is None:
            self._loaded_strings.clear()
        else:
            self._loaded_strings = [s for s in self._loaded_strings if not carries(s, texts)]


class PrivateLogHandler(RotatingFileHandler):
    """A rotating log file whose every file (the new one after a roll-over too) is 0600."""

    def _open(self) -> io.TextIOWrapper:
        private_file(Path(self.baseFilename))
        return super()._open()


@contextlib.contextmanager
def logs_to_file(path: Path | None, *, level: str) -> Iterator[None]:
    """Send every log record at ``level`` or above (and Python warnings) to ``path``
    instead of the screen, with the formatter already configured; restore the handlers and
    level after. ``None``: leave logging as it is."""
    if path is None:
        yield
        return
    root = logging.getLogger()
    saved, saved_level = list(root.handlers), root.level
    handler = PrivateLogHandler(path, maxBytes=LOG_MAX_BYTES, backupCount=1, encoding="utf-8")
    formatter = next((h.formatter for h in saved if h.formatter is not None), None)
    handler.setFormatter(formatter or logging.Formatter(LOG_FORMAT))
    for old in saved:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.setLevel(saved_level)
        root.removeHandler(handler)
        handler.close()
        for old in saved:
            root.addHandler(old)


# --- the streamed answer


class _Tail:
    """While an answer grows past the screen, show its last lines (the final rendering,
    after the Live region stops, shows all of it)."""

    def __init__(self, renderable: RenderableType, *, reserve: int) -> None:
        self.renderable = renderable
        self.reserve = reserve

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        room = max(1, console.size.height - self.reserve)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()


class LiveSink:
    """A :class:`core.streaming.reply.ReplySink` over a ``rich.live.Live`` region.

    ``status(text)`` shows a spinner (labelled ``text`` until the first text arrives,
    "writing…" after); ``post``/``edit`` replace the text, rendered as Markdown. Use as a
    context manager: entering starts the region, leaving renders the text whole, without
    the spinner, and stops it.
    """

    def __init__(self, console: Console) -> None:
        self._console = console
        self._texts: list[str] = []
        self._status: str | None = None
        self._live = Live(console=console, refresh_per_second=10, transient=False)

    def __enter__(self) -> LiveSink:
        self._live.start(refresh=False)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._status = None
        self._live.update(self._view(final=True), refresh=False)
        self._live.stop()

    async def post(self, *, text: str) -> str:
        self._texts.append(text)
        self._show()
        return str(len(self._texts) - 1)

    async def edit(self, *, handle: str, text: str) -> None:
        self._texts[int(handle)] = text
        self._show()

    async def status(self, *, text: str | None) -> None:
        self._status = text
        self._show()

    def _show(self) -> None:
        self._live.update(self._view(final=False), refresh=True)

    def _view(self, *, final: bool) -> RenderableType:
        body: list[RenderableType] = [Markdown(_text_presentation(t)) for t in self._texts]
        if final:
            return Group(*body)
        parts: list[RenderableType] = [_Tail(Group(*body), reserve=2)] if body else []
        if self._status is not None:
            label = "writing…" if body else self._status
            parts.append(Spinner("dots", text=Text(label, style="dim"), style="cyan"))
        return Group(*parts)


def _text_presentation(text: str) -> str:
    """Without emoji presentation selectors (U+FE0F): terminals disagree on the width of
    ``⚠️``-style sequences, and a width miscounted breaks every redraw of the live region."""
    return text.replace("\N{VARIATION SELECTOR-16}", "")


async def until_stopped(stop: asyncio.Event, deltas: AsyncIterator[str]) -> AsyncIterator[str]:
    """``deltas`` until ``stop`` is set; then the pending step of ``deltas`` is cancelled
    (the turn loop stores the answer so far, marked as stopped, and does not reflect on it)
    and ``AnswerStopped`` is raised. ``deltas`` is closed in any case."""
    waiter: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
    step: asyncio.Future[object] | None = None
    try:
        while True:
            current: asyncio.Future[object] = asyncio.ensure_future(anext(deltas))
            step = current
            await asyncio.wait({current, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not current.done():
                raise AnswerStopped(STOPPED)
            try:
                delta = current.result()
            except StopAsyncIteration:
                return
            yield str(delta)
    finally:
        waiter.cancel()
        if step is not None and not step.done():  # stopped, or our caller was cancelled
            step.cancel()
            await asyncio.wait({step})
            if not step.cancelled():
                step.exception()  # the answer is stopped: a late delta or error is moot
        close = getattr(deltas, "aclose", None)
        if close is not None:
            await close()


@contextlib.contextmanager
def no_echo(stream: TextIO) -> Iterator[None]:
    """Keys typed while an answer streams are not echoed into it (they stay typed ahead);
    Ctrl-C still sends SIGINT. Does nothing where ``termios`` is missing."""
    try:
        import termios

        fd = stream.fileno()
        before = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):
        yield
        return
    quiet = list(before)
    quiet[3] &= ~termios.ECHO  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, before)


# --- the screen


def _key_bindings() -> KeyBindings:
    keys = KeyBindings()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _clear(event: KeyPressEvent) -> None:
        event.current_buffer.reset()

    return keys


class TtyScreen:
    """The :class:`bots.terminal.chat.Screen` of an interactive terminal (see the module)."""

    def __init__(self, *, stdin: TextIO, stdout: TextIO, files: ChatFiles | None) -> None:
        self.files = files
        self.console = Console(file=stdout, highlight=False)
        self._stdin = stdin
        self._input = create_input(stdin)
        self._output = create_output(stdout)
        self.history: History = PrivateHistory(files.history) if files else InMemoryHistory()
        self.session: PromptSession[str] = PromptSession(
            "> ",
            history=self.history,
            key_bindings=_key_bindings(),
            prompt_continuation="  ",
            input=self._input,
            output=self._output,
        )
        self._stop: asyncio.Event | None = None

    @property
    def help_extra(self) -> str:
        lines = [
            "Enter sends; Esc+Enter (or Alt+Enter) starts a new line; a paste is one message.",
            "Up/Down: earlier inputs. Ctrl-C stops an answer or clears the line; Ctrl-D leaves.",
        ]
        if self.files is not None:
            lines.append(f"Input history: {self.files.history} (/forget reaches it)")
            lines.append(f"Log: {self.files.log}")
        return "\n".join(lines)

    def say(self, text: str, *, style: str = "") -> None:
        self.console.print(Text(text, style=style))

    async def note(self, text: str) -> None:
        app = self.session.app
        if not app.is_running:
            self.say(text, style="dim")
            return
        with set_app(app):  # a background task: the prompt's app is not its current one
            await run_in_terminal(lambda: self.say(text, style="dim"))

    async def read(self) -> str:
        """The next input; raises ``EOFError`` at Ctrl-D."""
        return await self.session.prompt_async(handle_sigint=False)

    async def answer(self, deltas: AsyncIterator[str]) -> None:
        """Stream the answer; ``ModelError``, ``LimitReached`` and a Ctrl-C show as a note
        under the text so far (:func:`core.streaming.reply.stream_reply`)."""
        stop = self._stop = asyncio.Event()
        try:
            with no_echo(self._stdin), LiveSink(self.console) as sink:
                await stream_reply(sink, until_stopped(stop, deltas), TERMINAL_STREAM)
        finally:
            self._stop = None
            self.console.line()

    async def confirm(self, question: str) -> bool:
        ask: PromptSession[str] = PromptSession(
            input=self._input, output=self._output, history=InMemoryHistory()
        )
        try:
            reply = await ask.prompt_async(f"{question} [y/N] ", handle_sigint=False)
        except (KeyboardInterrupt, EOFError):
            return False
        return reply.strip().lower() in ("y", "yes")

    async def forget_history(self, *, texts: Sequence[str] | None = None) -> None:
        if isinstance(self.history, PrivateHistory):
            await asyncio.to_thread(self.history.forget, texts)

    def interrupt(self) -> None:
        """SIGINT (Ctrl-C outside the prompt): stop the answer streaming, if any."""
        if self._stop is not None:
            self._stop.set()

    @contextlib.contextmanager
    def catching_interrupts(self) -> Iterator[None]:
        """Route SIGINT to :meth:`interrupt` (instead of ending the program) while inside;
        the handler before (e.g. ``asyncio.run``'s) is restored after."""
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGINT)
        try:
            loop.add_signal_handler(signal.SIGINT, self.interrupt)
        except (NotImplementedError, RuntimeError, ValueError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


# --- the session


async def run_interactive(
    settings: Settings, *, db_url: str, user_key: str, stdin: TextIO, stdout: TextIO
) -> int:
    """The chat in a terminal until /quit or Ctrl-D; returns the exit code (0)."""
    files: ChatFiles | None = ChatFiles.for_db(db_url, user_key)
    problem = None
    try:
        await asyncio.to_thread(ChatFiles.for_db(db_url, user_key).prepare)
    except OSError as exc:
        problem, files = f"(no input history or log file: {exc})", None
    screen = TtyScreen(stdin=stdin, stdout=stdout, files=files)
    with logs_to_file(files.log if files else None, level=settings.log_level):
        async with open_runtime(settings, db_url=db_url, start=False) as rt:
            chat_loop = rt.loop if isinstance(rt, ChatRuntime) else None  # None: no API key
            chat = TerminalChat(rt.service, user_key=user_key, screen=screen, loop=chat_loop)
            with sole_chat(terminal_folder(db_url), user_key) as alone:
                cut = await chat.cut_lines() if alone else []  # before reflections resume
                if isinstance(rt, ChatRuntime):
                    if isinstance(rt.model, ClaudeChatModel):  # while the first line is typed
                        rt.model.preload()
                    await rt.start(on_learned=chat.learned)
                screen.say(
                    f"SelfMind, remembering you as {user_key}. /help lists commands and keys."
                )
                if problem:
                    screen.say(problem, style="yellow")
                with screen.catching_interrupts():
                    await chat.recover(cut)
                    await _converse(chat, screen)
                    if isinstance(rt, ChatRuntime) and rt.reflector.pending:
                        screen.say("(finishing what I learned…)", style="dim")
                        await rt.reflector.drain(settings.shutdown_timeout_s)
    return 0


async def _converse(chat: TerminalChat, screen: TtyScreen) -> None:
    while True:
        try:
            text = await screen.read()
        except EOFError:
            return
        try:
            if not await chat.handle(text):
                return
        except SelfMindError as exc:
            screen.say(f"Error: {exc}", style="red")
        except Exception:  # the adapter edge: log it, say something short, keep chatting
            logger.exception("terminal chat: unexpected error")
            where = f" (details in {screen.files.log})" if screen.files else ""
            screen.say(f"Something went wrong{where}.", style="red")
