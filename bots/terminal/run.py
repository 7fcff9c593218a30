"""``selfmind chat``: the terminal chat (:mod:`bots.terminal`) until the user leaves."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from bots.terminal.chat import PlainScreen, TerminalChat, read_line
from bots.terminal.history import history_file, sole_chat, terminal_folder
from core.errors import SelfMindError
from core.runtime import ChatRuntime, open_runtime
from core.settings import Settings

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
