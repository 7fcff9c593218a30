"""The interactive terminal's parts in process: stopping an answer, the live sink, the
private files, logging to a file."""

from __future__ import annotations

import asyncio
import io
import logging
import stat
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from bots.terminal.chat import count, cut_note
from bots.terminal.tty import (
    STOPPED,
    TERMINAL_STREAM,
    AnswerStopped,
    ChatFiles,
    LiveSink,
    PrivateHistory,
    PrivateLogHandler,
    logs_to_file,
    until_stopped,
)
from core.errors import ModelError
from core.streaming.reply import stream_reply


def test_plurals() -> None:
    assert count(0, "memory", "memories") == "0 memories"
    assert count(1, "memory", "memories") == "1 memory"
    assert count(2, "memory", "memories") == "2 memories"


def test_cut_note_is_one_short_plain_line() -> None:
    note = cut_note("line one\n\tline two \x1b[31mred\x07 " + "é" * 200)
    assert note.startswith("(answering your last message, cut off by a crash: line one line two")
    assert "\n" not in note and "\x1b" not in note and "\x07" not in note
    assert note.endswith("…)") and len(note) < 120
    assert cut_note("") == "(answering your last message, cut off by a crash: )"


async def test_stop_cancels_the_pending_step_and_closes_the_answer() -> None:
    closed: list[str] = []

    async def answer() -> AsyncIterator[str]:
        try:
            yield "Hello"
            await asyncio.sleep(3600)  # the next token never comes
            yield "never"
        finally:
            closed.append("stored what was shown")  # as TurnLoop.answer's finally does

    stop = asyncio.Event()
    got: list[str] = []
    deltas = until_stopped(stop, answer())

    async def read() -> None:
        async for delta in deltas:
            got.append(delta)
            asyncio.get_running_loop().call_later(0.01, stop.set)

    with pytest.raises(AnswerStopped, match=r"Stopped \(Ctrl-C\)"):
        await read()
    assert got == ["Hello"] and closed == ["stored what was shown"]


async def test_stop_before_the_first_delta_and_errors_pass_through() -> None:
    async def never() -> AsyncIterator[str]:
        await asyncio.sleep(3600)
        yield "never"

    stop = asyncio.Event()
    stop.set()
    with pytest.raises(AnswerStopped):
        async for _ in until_stopped(stop, never()):
            pass

    async def failing() -> AsyncIterator[str]:
        yield "part"
        raise ModelError("boom", user_message="I can't reach Claude right now.")

    got = [d async for d in _catching(until_stopped(asyncio.Event(), failing()))]
    assert got == ["part", "ModelError"]


async def _catching(deltas: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        async for delta in deltas:
            yield delta
    except ModelError as exc:
        yield type(exc).__name__


def _console(height: int = 10) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out,
        force_terminal=True,
        width=60,
        height=height,
        color_system=None,
        legacy_windows=False,
    )
    return console, out


async def test_live_sink_renders_markdown_and_the_stop_note() -> None:
    console, out = _console()

    async def answer() -> AsyncIterator[str]:
        yield "Some **bold** "
        yield "text"
        raise AnswerStopped(STOPPED)

    with LiveSink(console) as sink:
        result = await stream_reply(sink, answer(), TERMINAL_STREAM)
    assert isinstance(result.error, AnswerStopped)
    shown = out.getvalue()
    assert "Some bold text" in shown and "**" not in shown
    assert "⚠ Stopped (Ctrl-C)." in shown and "\N{VARIATION SELECTOR-16}" not in shown


async def test_live_sink_shows_the_tail_while_streaming_and_all_at_the_end() -> None:
    console, _ = _console(height=8)
    sink = LiveSink(console)
    text = "\n\n".join(f"paragraph {i}" for i in range(20))
    await sink.status(text="thinking…")
    await sink.post(text=text)
    streaming = [
        "".join(s.text for s in line).strip()
        for line in console.render_lines(sink._view(final=False), console.options)
    ]
    assert len(streaming) <= 8  # fits the screen: the newest lines, the spinner under them
    shown = [line for line in streaming if line]
    assert shown[-2:] == ["paragraph 19", "⠋ writing…"] and "paragraph 0" not in streaming
    final = "".join(s.text for line in console.render_lines(sink._view(final=True)) for s in line)
    assert "paragraph 0" in final and "paragraph 19" in final and "writing…" not in final


def test_files_are_private_and_follow_the_database(tmp_path: Path) -> None:
    files = ChatFiles.for_db(f"sqlite:///{tmp_path}/data/m.db", "cli:alice")
    assert files.folder == tmp_path / "data"
    assert files.history.parent == tmp_path / "data" / "history"
    files.prepare()
    for path in (files.history, files.log):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    pg = ChatFiles.for_db("postgresql://postgres@127.0.0.1:5432/test", "cli:alice")
    assert pg.folder == Path.home() / ".selfmind"


def test_history_forget_empties_file_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "chat_history"
    history = PrivateHistory(path)
    history.append_string("secret line one")
    history.append_string("two\nlines")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert history.get_strings() == ["secret line one", "two\nlines"]
    history.forget()
    assert not path.exists() and history.get_strings() == []
    assert list(PrivateHistory(path).load_history_strings()) == []


def test_history_file_keeps_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "chat_history"
    key = "AKIA" + "Z7Q2XK4M9TBW3HJD"
    history = PrivateHistory(path)
    history.append_string(f"my aws key is {key}")
    assert key not in path.read_text()
    assert "my aws key is [redacted: aws key]" in path.read_text()
    assert history.get_strings() == [f"my aws key is {key}"]  # this session's Up
    stored = list(PrivateHistory(path).load_history_strings())
    assert stored == ["my aws key is [redacted: aws key]"]


def test_logs_go_to_the_file_and_handlers_come_back(tmp_path: Path) -> None:
    log = tmp_path / "chat.log"
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    with logs_to_file(log, level="INFO"):
        assert root.handlers != before
        logging.getLogger("core.chat.loop").info("turn=%d", 7)
        logging.getLogger("core.chat.loop").debug("not at INFO")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a library warning", UserWarning, stacklevel=1)
    assert root.handlers == before and root.level == level
    written = log.read_text()
    assert "core.chat.loop" in written and "turn=7" in written and "not at INFO" not in written
    assert "a library warning" in written
    with logs_to_file(None, level="INFO"):
        assert root.handlers == before


def test_the_log_rolls_over_into_private_files(tmp_path: Path) -> None:
    log = tmp_path / "chat.log"
    handler = PrivateLogHandler(log, maxBytes=40, backupCount=1, encoding="utf-8")
    try:
        for i in range(20):
            handler.emit(
                logging.LogRecord("core.chat.loop", logging.INFO, "", 0, "turn=%d", (i,), None)
            )
    finally:
        handler.close()
    rolled = tmp_path / "chat.log.1"
    assert rolled.exists() and log.stat().st_size <= 40
    assert "turn=19" in log.read_text()
    assert not (tmp_path / "chat.log.2").exists()  # one older file kept
    for path in (log, rolled):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
