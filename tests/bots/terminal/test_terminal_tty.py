"""The interactive terminal chat, for real: ``selfmind chat`` in a pseudo-terminal (pexpect),
its output fed into a terminal emulator (pyte) so the tests read the screen a person sees,
talking to the fake Anthropic server over a real socket, with ``HOME`` in a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pyte
import pytest

from bots.terminal.history import history_file
from core.chat.loop import STOPPED_MARK
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic, Reply, slow
from tests.loop_helpers import API_KEY, memories_reply

pytestmark = pytest.mark.slow

ROWS, COLS = 60, 100
ALICE = "cli:alice"  # every chat here runs with --user alice
WAIT_S = 90.0  # generous: the machine is shared; every wait still ends


class ThreadedFake:
    """The fake Anthropic server on an event loop of its own thread (pexpect blocks)."""

    def __init__(self, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.fake = FakeAnthropic(**options)

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(30)
        return self.fake

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with ThreadedFake() as server:
        yield server


class Terminal:
    """A ``selfmind chat`` process on a pseudo-terminal and the screen it draws."""

    def __init__(self, home: Path, base_url: str, *args: str) -> None:
        self.home = home
        home.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SELFMIND_"))}
        env.update(
            HOME=str(home),
            PYTHONPATH=str(REPO_ROOT),
            ANTHROPIC_API_KEY=API_KEY,
            ANTHROPIC_BASE_URL=base_url,
            TERM="xterm-256color",
            # pexpect does not answer cursor-position requests; prompt_toolkit's own switch.
            PROMPT_TOOLKIT_NO_CPR="1",
        )
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.raw: list[str] = []
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "bots.cli", *args, "chat", "--user", "alice"],
            env=env,
            cwd=str(home),  # no .env there
            dimensions=(ROWS, COLS),
            encoding="utf-8",
            codec_errors="replace",
            timeout=WAIT_S,
        )
        self.child.logfile_read = self
        self.wait_prompt()

    # pexpect's logfile_read: everything the program prints goes to the emulator
    def write(self, data: str) -> None:
        self.raw.append(data)
        self.stream.feed(data)

    def flush(self) -> None:
        return None

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display).rstrip()

    def pump(self, seconds: float) -> None:
        """Read what the program prints for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                self.child.read_nonblocking(65536, timeout=0.1)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                return

    def wait_until(self, found: Callable[[], bool], what: str) -> str:
        """Read output until ``found()``; fails (with the screen) after ``WAIT_S``."""
        deadline = time.monotonic() + WAIT_S
        while not found():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not on screen after {WAIT_S} s:\n{self.text()}")
            try:
                self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                message = f"the chat ended; {what} not on screen:\n{self.text()}"
                raise AssertionError(message) from None
        return self.text()

    def wait_for(self, needle: str, *, after: int = 0) -> str:
        """Wait until ``needle`` is on screen, on row ``after`` or below (a needle the chat
        wrapped, such as a long path, counts: rows joined, spaces ignored)."""

        def shown() -> bool:
            rows = self.screen.display[after:]
            if any(needle in line for line in rows):
                return True
            joined = "".join("".join(line.split()) for line in rows)
            return "".join(needle.split()) in joined

        return self.wait_until(shown, repr(needle))

    def wait_prompt(self, *, after: int = 0) -> str:
        """Wait for an empty prompt below row ``after``."""
        return self.wait_until(
            lambda: any(line.rstrip() == ">" for line in self.screen.display[after + 1 :]),
            f"an empty prompt below row {after}",
        )

    def row_of(self, needle: str) -> int:
        rows = [i for i, line in enumerate(self.screen.display) if needle in line]
        assert rows, f"{needle!r} not on screen:\n{self.text()}"
        return rows[-1]

    def say(self, text: str) -> None:
        """Type ``text`` and press Enter once the prompt is back."""
        self.child.send(text + "\r")

    def bold(self, word: str) -> bool:
        row = self.row_of(word)
        col = self.screen.display[row].index(word)
        return all(self.screen.buffer[row][col + i].bold for i in range(len(word)))

    def exit_code(self) -> int | None:
        self.child.expect(pexpect.EOF)
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def spawn(tmp_path: Path, fake: FakeAnthropic, *args: str) -> Terminal:
    return Terminal(tmp_path / "home", fake.base_url, *args)


def answered(fake: FakeAnthropic, count: int) -> list[dict[str, Any]]:
    """Wait until the fake has ``count`` chat requests; their last user messages."""
    deadline = time.monotonic() + WAIT_S
    while len(fake.requests_of("chat")) < count:
        assert time.monotonic() < deadline, f"{len(fake.requests_of('chat'))} chat requests"
        time.sleep(0.05)
    return [r.body["messages"][-1] for r in fake.requests_of("chat")]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_answer_renders_as_markdown_while_it_streams(tmp_path: Path, fake: FakeAnthropic) -> None:
    answer = "# Plan\n\nUse **bold** words, then a list:\n\n- first item\n- second item\n"
    fake.enqueue(
        Reply(text=answer, first_token_delay_s=2.0, chunk_size=3, chunk_delay_s=0.25),
        kind="chat",
    )
    fake.enqueue(
        memories_reply(("The user plans things in lists.", "preference", "communication")),
        kind="extract",
    )
    term = spawn(tmp_path, fake)
    try:
        term.say("make me a plan")
        term.wait_for("thinking…")  # the spinner while recall and the first token are pending
        term.wait_for("Use")
        mid = term.wait_for("writing…")  # a spinner under the text while it streams
        assert "Plan" in mid and "# Plan" not in mid  # rendered while it streams
        assert "second item" not in mid
        term.wait_for("• second item")
        term.wait_for("(remembered #1: The user plans things in lists.)")
        screen = term.text()
        assert "Use bold words, then a list:" in screen and "**" not in screen
        assert term.bold("bold")
        assert "# Plan" not in screen and "Plan" in screen  # a heading, not a raw line
        assert "• first item" in screen and "- first" not in screen
        assert "thinking…" not in screen and "writing…" not in screen
        # Logs never print inside the conversation: they are in the log file named in /help.
        term.say("/help")
        log = tmp_path / "home" / ".selfmind" / "chat.log"
        term.wait_for(f"Log: {log}")
        screen = term.text()
        assert "INFO" not in screen and "core." not in screen and "HTTP" not in screen
        assert "Esc+Enter" in screen  # how to write several lines
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
    logged = log.read_text()
    assert "core.chat.loop: turn=1" in logged and "reply finished" in logged
    assert "make me a plan" not in logged  # message text only at DEBUG
    folder = tmp_path / "home" / ".selfmind"
    assert mode(folder) == 0o700
    assert mode(log) == 0o600 and mode(history_file(folder, ALICE)) == 0o600
    assert mode(folder / "history") == 0o700


def test_ctrl_c_stops_an_answer_then_the_next_is_answered(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    long = " ".join(f"word{i}" for i in range(400))
    fake.enqueue(Reply(text=long, chunk_size=6, chunk_delay_s=0.05), kind="chat")
    term = spawn(tmp_path, fake)
    try:
        term.say("tell me a long story")
        term.wait_for("word20 ")
        term.child.sendintr()
        term.wait_for("Stopped (Ctrl-C).")
        assert term.child.isalive()
        assert "word399" not in term.text()
        fake.enqueue("The second answer.", kind="chat")
        term.wait_prompt(after=term.row_of("Stopped (Ctrl-C)."))
        term.say("and now?")
        term.wait_for("The second answer.")
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
    # The stopped answer is stored as far as it went, marked as stopped, sent as history
    # apart from the next question, and never reflected on (it was not delivered).
    second = fake.requests_of("chat")[1].body["messages"]
    cut = second[-2]
    assert cut["role"] == "assistant" and second[-1]["content"] == "and now?"
    cut_text = cut["content"] if isinstance(cut["content"], str) else cut["content"][0]["text"]
    assert cut_text.startswith("word0 word1") and "word399" not in cut_text
    assert cut_text.endswith(STOPPED_MARK)
    exchanges = [str(r.body["messages"]) for r in fake.requests_of("extract")]
    assert not any("tell me a long story" in e for e in exchanges)
    with sqlite3.connect(tmp_path / "home" / ".selfmind" / "memory.db") as db:
        query = "SELECT text FROM turns WHERE role = 'assistant' ORDER BY id"
        stored = db.execute(query).fetchall()
    assert [t for (t,) in stored] == [cut_text, "The second answer."]


def test_a_line_a_kill_cut_is_answered_once_at_the_next_start(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    """Killed (SIGKILL) mid-answer: the next chat answers the line before its first prompt,
    under a line saying so; the one after that does not answer it again."""
    long = " ".join(f"word{i}" for i in range(400))
    fake.enqueue(Reply(text=long, chunk_size=6, chunk_delay_s=0.05), kind="chat")
    term = spawn(tmp_path, fake)
    try:
        term.say("what is the capital of Portugal?")
        term.wait_for("word20 ")
        term.child.kill(signal.SIGKILL)
        term.child.expect(pexpect.EOF)
    finally:
        term.close()
    fake.enqueue("Lisbon is the capital.", kind="chat")
    term = spawn(tmp_path, fake)  # returns once the prompt shows: after the recovery
    try:
        shown = term.text()
        note = "(answering your last message, cut off by a crash: what is the capital of"
        assert shown.count(note) == 1 and shown.count("Lisbon is the capital.") == 1
        assert shown.index(note) < shown.index("Lisbon is the capital.")
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
    term = spawn(tmp_path, fake)
    try:
        assert "cut off by a crash" not in term.text()
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
    asked = answered(fake, 2)
    assert len(asked) == 2 and all("capital of Portugal" in str(m) for m in asked)


def test_ctrl_c_while_waiting_for_the_first_token(tmp_path: Path, fake: FakeAnthropic) -> None:
    fake.enqueue(Reply(text="Too late.", first_token_delay_s=60.0), kind="chat")
    term = spawn(tmp_path, fake)
    try:
        term.say("are you there?")
        term.wait_for("thinking…")
        answered(fake, 1)  # the request is out; its first token is 60 s away
        started = time.monotonic()
        term.child.sendintr()
        term.wait_for("Stopped (Ctrl-C).")
        assert time.monotonic() - started < 30  # not the 60 s the first token would take
        assert "thinking…" not in term.text() and "Too late." not in term.text()
        fake.enqueue("Here now.", kind="chat")
        term.wait_prompt(after=term.row_of("Stopped (Ctrl-C)."))
        term.say("hello?")
        term.wait_for("Here now.")
    finally:
        term.close()


def test_a_note_from_reflection_keeps_the_line_being_typed(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    fake.enqueue("Noted.", kind="chat")
    fake.enqueue(
        slow(memories_reply(("The user drinks green tea.", "preference", "general")), 4.0),
        kind="extract",
    )
    term = spawn(tmp_path, fake)
    try:
        term.say("I drink green tea")
        term.wait_for("Noted.")
        term.wait_prompt(after=term.row_of("Noted."))
        term.child.send("half a li")  # typing while the reflection runs
        term.wait_for("> half a li")
        term.wait_for("(remembered #1: The user drinks green tea.)")
        term.pump(0.5)
        lines = term.text().splitlines()
        assert lines[-1] == "> half a li"  # the prompt is redrawn under the note, text kept
        assert lines.index("(remembered #1: The user drinks green tea.)") < len(lines) - 1
        term.child.send("ne\r")
        assert answered(fake, 2)[-1]["content"] == "half a line"
    finally:
        term.close()


def test_paste_is_one_message_and_esc_enter_adds_a_line(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    term = spawn(tmp_path, fake)
    try:
        term.child.send("\x1b[200~line1\nline2\nline3\x1b[201~")
        term.wait_for("line3")
        term.child.send("\r")
        assert answered(fake, 1)[-1] == {"role": "user", "content": "line1\nline2\nline3"}
        term.wait_for("You said: line1")
        term.wait_prompt(after=term.row_of("You said: line1"))
        term.child.send("first\x1b\rsecond\r")  # Esc+Enter, as Alt+Enter sends it
        assert answered(fake, 2)[-1] == {"role": "user", "content": "first\nsecond"}
        term.wait_for("You said: first")
        term.pump(1.0)
        assert len(fake.requests_of("chat")) == 2  # one call per message, not per line
    finally:
        term.close()


def test_ctrl_c_clears_the_line_up_recalls_history_ctrl_d_leaves(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    term = spawn(tmp_path, fake)
    try:
        term.child.send("abc")
        term.wait_for("> abc")
        term.child.send("\x03")  # Ctrl-C at the prompt: raw mode, so a key, not a signal
        term.pump(0.5)
        assert "abc" not in term.text() and term.child.isalive()
        term.say("hello")
        assert answered(fake, 1)[-1]["content"] == "hello"
        term.wait_for("You said: hello")
        term.wait_prompt(after=term.row_of("You said: hello"))
        term.child.sendeof()
        assert term.exit_code() == 0
        assert term.screen.cursor.x == 0  # left on a fresh line
    finally:
        term.close()
    history = history_file(tmp_path / "home" / ".selfmind", ALICE)
    assert "+hello" in history.read_text() and mode(history) == 0o600

    again = spawn(tmp_path, fake)  # the history survives the session: Up brings it back
    try:
        again.child.send("\x1b[A")
        again.wait_for("> hello")
        again.child.send("\r")
        assert answered(fake, 2)[-1]["content"] == "hello"
    finally:
        again.close()


def test_forget_reaches_the_users_input_history_only(tmp_path: Path, fake: FakeAnthropic) -> None:
    folder = tmp_path / "home" / ".selfmind"
    history = history_file(folder, ALICE)
    bobs = history_file(folder, "cli:bob")
    bobs.parent.mkdir(parents=True)
    bobs.write_text("\n# 2026-12-01\n+/remember The user's cat is called Miso.\n")
    term = spawn(tmp_path, fake)
    try:
        term.say("/remember The user's cat is called Miso.")
        term.wait_for("Remembered (#1): The user's cat is called Miso.")
        term.say("/remember The user lives in Oslo.")
        term.wait_for("Remembered (#2): The user lives in Oslo.")
        term.say("/forget 1")
        term.wait_for("Forgot #1.")
        assert "Miso" not in history.read_text() and "Oslo" in history.read_text()
        term.child.send("\x1b[A")  # Up: the latest entries, never the forgotten one
        term.wait_for("> /forget 1", after=term.row_of("Forgot #1."))
        term.child.send("\x1b[A")
        term.wait_for("> /remember The user lives in Oslo.", after=term.row_of("Forgot #1."))
        term.child.send("\x1b[A")
        term.pump(0.5)
        assert term.text().splitlines()[-1] == "> /remember The user lives in Oslo."
        term.child.send("\x03")  # clear the line

        term.say("/forget all")
        term.wait_for(
            "Forget all 1 memory, your input history and our conversation history? "
            "This cannot be undone. [y/N]"
        )
        term.say("")  # Enter alone is no
        term.wait_for("Nothing was forgotten.")
        assert "Oslo" in history.read_text()
        term.say("/forget all")
        term.wait_for("[y/N]", after=term.row_of("Nothing was forgotten."))
        term.say("y")
        term.wait_for("Forgot all 1 memory and our conversation history.")
        assert not history.exists() or "Oslo" not in history.read_text()
        term.say("/stats")
        term.wait_for("0 memories")
        assert mode(history) == 0o600  # made again, private, for what is typed after
        term.child.send("\x1b[A")  # Up: only what was typed after the forgetting
        term.wait_for("> /stats", after=term.row_of("0 memories"))
        term.child.send("\x1b[A")
        term.pump(0.5)
        assert term.text().splitlines()[-1] == "> /stats"  # nothing older
    finally:
        term.close()
    assert "Miso" in bobs.read_text()  # another user's history is never touched


def test_files_follow_the_database_folder(tmp_path: Path, fake: FakeAnthropic) -> None:
    data = tmp_path / "data"
    data.mkdir()
    term = spawn(tmp_path, fake, "--db", str(data / "m.db"), "--log-level", "DEBUG")
    try:
        term.say("/help")
        term.wait_for(f"Log: {data / 'chat.log'}")
        shown = "".join(term.text().split())  # the long path wraps on the screen
        assert "".join(f"Input history: {history_file(data, ALICE)}".split()) in shown
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
    assert mode(data / "chat.log") == 0o600 and mode(history_file(data, ALICE)) == 0o600
    # The SDK was imported while the first line was typed, not at the first answer.
    assert "the model SDK was preloaded in" in (data / "chat.log").read_text()
    assert not (tmp_path / "home" / ".selfmind").exists()


def test_history_and_log_that_cannot_be_created_are_named_and_the_chat_goes_on(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    data = tmp_path / "data"
    history_file(data, ALICE).mkdir(parents=True)  # a folder where the file should be
    term = spawn(tmp_path, fake, "--db", str(data / "m.db"))
    try:
        term.wait_for("(no input history or log file:")
        assert history_file(data, ALICE).name in "".join(term.text().split())  # may wrap
        term.say("still there?")
        term.wait_for("You said: still there?")
        term.say("/help")
        term.wait_for("Ctrl-D leaves.")
        assert "Log:" not in term.text()
        term.child.sendeof()
        assert term.exit_code() == 0
    finally:
        term.close()
