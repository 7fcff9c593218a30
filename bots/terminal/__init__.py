"""Terminal chat: the third thin adapter (``selfmind chat``).

Inputs starting with ``/`` are memory commands and need no API key::

    /remember TEXT   /forget ID   /forget all   /memories [QUERY]   /stats
    /memory pause|resume|off|on   /attach PATH   /help   /quit

Anything else is a chat message for Claude.

- In a terminal (standard input and output both ttys): line editing and an input history
  file per user, which forgetting reaches (:mod:`bots.terminal.history`), the answer
  rendered as Markdown while it streams, Ctrl-C to stop an answer, ``/forget all`` asks
  first; logs go to a file named in ``/help`` (see :mod:`bots.terminal.tty`).
- Otherwise (a pipe, a script): one message per line, plain text, no ANSI, logs on
  standard error as configured; at end of input pending work is finished and the program
  exits 0.

At the start, a line of this user's left without an answer in the last
``core.chat.intake.RECOVERY_WINDOW`` (a kill while its answer streamed, or an answer that
failed before any of it showed) is answered once, under a line saying so
(:meth:`TerminalChat.recover`), by the same intake rules as Slack and Discord, unless
another chat of that user is open on this machine (its line may be answering now). An
answer is stored before its last character is written (:meth:`TerminalChat._watched`), so
a kill never leaves a whole answer on screen that the next start writes again.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from bots.terminal.chat import PlainScreen, TerminalChat, read_line
from bots.terminal.history import history_file, sole_chat, terminal_folder
from core.errors import SelfMindError
from core.runtime import ChatRuntime, open_runtime
from core.settings import Settings

__all__ = ["TerminalChat", "run_terminal"]

logger = logging.getLogger(__name__)


async def run_terminal(
    settings: Settings,
    *,
    db_url: str,
    user_key: str,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the chat until /quit, Ctrl-D or end of input; returns the exit code: 0, or (piped)
    1 when a message got no answer, with one line on stderr saying how many and why."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    if stdin.isatty() and stdout.isatty():
        from bots.terminal.tty import run_interactive

        return await run_interactive(
            settings, db_url=db_url, user_key=user_key, stdin=stdin, stdout=stdout
        )
    async with open_runtime(settings, db_url=db_url, start=False) as rt:
        chat_loop = rt.loop if isinstance(rt, ChatRuntime) else None  # None: no API key
        history = history_file(terminal_folder(db_url), user_key)
        chat = TerminalChat(
            rt.service,
            user_key=user_key,
            screen=PlainScreen(stdout, history=history),
            loop=chat_loop,
        )
        with sole_chat(terminal_folder(db_url), user_key) as alone:
            cut = await chat.cut_lines() if alone else []  # before reflections resume
            if isinstance(rt, ChatRuntime):
                await rt.start(on_learned=chat.learned)
            await chat.recover(cut)
            while True:
                line = await read_line(stdin, None, stdout)
                if line is None:
                    break
                try:
                    if not await chat.handle(line):
                        break
                except SelfMindError as exc:
                    chat.screen.say(f"Error: {exc}")
            if isinstance(rt, ChatRuntime) and rt.reflector.pending:
                await rt.reflector.drain(settings.shutdown_timeout_s)
    if chat.unanswered:
        sys.stderr.write(
            f"error: {chat.unanswered} of {chat.messages} messages got no answer"
            f" (last: {chat.last_failure})\n"
        )
        return 1
    return 0
