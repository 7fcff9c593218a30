"""Terminal chat: the third thin adapter (``selfmind chat``).

Lines starting with ``/`` are memory commands and need no API key::

    /remember TEXT   /forget ID   /forget all   /memories [QUERY]   /stats   /help   /quit

Other lines are chat messages for Claude. When standard input is not a terminal, one message
is read per line; at end of input pending work is finished and the program exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TextIO

from core.errors import MemoryInputError, MemoryNotFound, ModelError, SelfMindError
from core.loop import IncomingMessage, TurnLoop
from core.models import utcnow
from core.reflection import ReflectionResult
from core.runtime import open_runtime
from core.service import MemoryService, parse_memory_id
from core.settings import Settings

logger = logging.getLogger(__name__)

HELP = (
    "Commands: /remember TEXT, /forget ID, /forget all, /memories [QUERY], /stats, /help, "
    "/quit. Anything else is a message for Claude."
)
NO_KEY = "Chat needs ANTHROPIC_API_KEY (set it in the environment or .env); /commands work now."


class TerminalChat:
    """One terminal session of one user (memory key ``cli:NAME``, origin ``private``)."""

    def __init__(
        self,
        service: MemoryService,
        *,
        user_key: str,
        out: TextIO,
        loop: TurnLoop | None = None,
        session: str | None = None,
    ) -> None:
        self.service = service
        self.user_key = user_key
        self.out = out
        self.loop = loop
        self.conversation_key = f"{user_key}:terminal:{session or 'default'}"

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def handle_line(self, line: str) -> bool:
        """Handle one input line; False means quit."""
        line = line.strip()
        if not line:
            return True
        if line.startswith("/"):
            return await self.command(line)
        await self.message(line)
        return True

    async def message(self, text: str) -> None:
        """A chat message: run the turn loop and stream the answer to the terminal."""
        if self.loop is None:
            self.say(NO_KEY)
            return
        message = IncomingMessage(
            user_key=self.user_key,
            conversation_key=self.conversation_key,
            text=text,
            origin="private",
            sent_at=utcnow(),
            where="a private terminal chat",
        )
        wrote = False
        try:
            async for delta in self.loop.answer(message):
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

    async def learned(self, result: ReflectionResult) -> None:
        """Reflection callback: a short note of what was remembered."""
        for memory in result.added:
            self.say(f"(remembered #{memory.id}: {memory.text})")

    async def command(self, line: str) -> bool:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        try:
            match name.lower():
                case "/quit" | "/exit":
                    return False
                case "/help":
                    self.say(HELP)
                case "/remember":
                    result = await self.service.remember(user_key=self.user_key, text=arg)
                    if result.status == "added":
                        self.say(f"Remembered (#{result.id}).")
                    else:
                        self.say(f"I already knew that (#{result.id}).")
                case "/forget":
                    await self.forget(arg)
                case "/memories":
                    await self.memories(arg)
                case "/stats":
                    stats = await self.service.stats(user_key=self.user_key)
                    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items()))
                    self.say(f"{stats.total} memories" + (f" ({kinds})" if kinds else ""))
                case _:
                    self.say(f"Unknown command {name}. {HELP}")
        except (MemoryInputError, MemoryNotFound) as exc:
            self.say(str(exc).capitalize() + ".")
        return True

    async def forget(self, arg: str) -> None:
        if arg.lower() == "all":
            count = await self.service.forget_all(user_key=self.user_key)
            noun = "memory" if count == 1 else "memories"
            self.say(f"Forgot {count} {noun} and our conversation history.")
            return
        if not arg.strip().removeprefix("#").isdigit():
            self.say("Usage: /forget ID (a number from /memories) or /forget all")
            return
        memory_id = parse_memory_id(arg)
        await self.service.forget(user_key=self.user_key, memory_id=memory_id)
        self.say(f"Forgot #{memory_id}.")

    async def memories(self, query: str) -> None:
        if query:
            found = await self.service.search(user_key=self.user_key, query=query, k=10)
            rows = [f.memory for f in found]
        else:
            rows = await self.service.list_memories(user_key=self.user_key, limit=50)
        if not rows:
            self.say("No memories match." if query else "I don't remember anything about you yet.")
        for m in rows:
            self.say(f"#{m.id} {m.text}")


async def read_lines(stream: TextIO, prompt: str | None, out: TextIO) -> str | None:
    """The next line, or None at end of input; reading happens off the event loop."""
    if prompt:
        out.write(prompt)
        out.flush()
    line = await asyncio.to_thread(stream.readline)
    return line if line else None


async def run_terminal(
    settings: Settings,
    *,
    db_url: str,
    user_key: str,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run the chat until /quit or end of input; returns the exit code."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    interactive = stdin.isatty()
    async with open_runtime(settings, db_url=db_url) as rt:
        chat = TerminalChat(rt.service, user_key=user_key, out=stdout, loop=rt.loop)
        if rt.reflector is not None:
            rt.reflector.on_learned = chat.learned
        if interactive:
            chat.say(f"SelfMind, remembering you as {user_key}. {HELP}")
        while True:
            line = await read_lines(stdin, "> " if interactive else None, stdout)
            if line is None:
                break
            try:
                if not await chat.handle_line(line):
                    break
            except SelfMindError as exc:
                chat.say(f"Error: {exc}")
        if rt.reflector is not None and rt.reflector.pending:
            if interactive:
                chat.say("(finishing what I learned...)")
            await rt.reflector.drain(settings.shutdown_timeout_s)
    return 0
