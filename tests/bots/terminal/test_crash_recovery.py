"""End to end through the terminal chat process: a SIGKILL after an answer, or while it
streams (then the next start answers the line, once), loses nothing, on both backends."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from core.chat.loop import CUT_MARK
from core.runtime import open_store
from tests.conftest import REPO_ROOT
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic, slow
from tests.loop_helpers import API_KEY, memories_reply, memory_text

PREFERENCE = "The user prefers answers in bullet points."


KILLED_AT_STORE = """
import os, signal, sys
from core.chat.loop import TurnLoop
store = TurnLoop._finish
async def killed(self, *args, **kwargs):
    if {after}:
        await store(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
TurnLoop._finish = killed
from bots.cli import main
main()
"""
"""The fault injection of the store-versus-screen tests, test-only: ``selfmind`` with the
turn loop's store of an answer (``TurnLoop._finish``: the answer, its usage, the reflection
queued, one transaction) replaced by a SIGKILL of the process, just before it (``after``
False) or just after it (True)."""


async def chat_process(
    db: Path | str,
    base_url: str,
    cwd: Path,
    user: str = "alice",
    *,
    killed_at_store: str | None = None,
) -> asyncio.subprocess.Process:
    """``selfmind chat --user USER`` on ``db``; ``killed_at_store``: ``"before"`` or
    ``"after"`` (:data:`KILLED_AT_STORE`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "SELFMIND_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=base_url)
    env.update(HOME=str(cwd))  # the terminal's files with PostgreSQL: ~/.selfmind
    run = ("-m", "bots.cli")
    if killed_at_store is not None:
        run = ("-c", KILLED_AT_STORE.format(after=killed_at_store == "after"))
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *run,
        "--db",
        str(db),
        "chat",
        "--user",
        user,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
    )


@pytest.mark.slow
async def test_sigkill_after_answer_then_resume_and_recall(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with running_fake_anthropic() as fake:
        fake.enqueue("Got it, bullet points from now on.", kind="chat")
        fake.enqueue(
            slow(memories_reply((PREFERENCE, "preference", "communication")), 60),
            kind="extract",
        )
        first = await chat_process(db, fake.base_url, tmp_path)
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write(b"I prefer answers in bullet points\n")
        await first.stdin.drain()
        line = await asyncio.wait_for(first.stdout.readline(), 30)
        assert b"bullet points from now on" in line
        for _ in range(300):  # the reflection call is in flight
            if fake.requests_of("extract"):
                break
            await asyncio.sleep(0.05)
        assert fake.requests_of("extract")
        first.send_signal(signal.SIGKILL)
        await first.wait()
        assert first.returncode == -signal.SIGKILL

        # A new process resumes the pending reflection (empty input: start, drain, exit).
        fake.enqueue(memories_reply((PREFERENCE, "preference", "communication")), kind="extract")
        second = await chat_process(db, fake.base_url, tmp_path)
        out, err = await asyncio.wait_for(second.communicate(b""), 60)
        assert second.returncode == 0, err.decode()
        assert f"(remembered #1: {PREFERENCE})".encode() in out
        assert len(fake.requests_of("extract")) == 2

        # And the memory is recalled into the next conversation's prompt.
        fake.enqueue("- like this", kind="chat")
        third = await chat_process(db, fake.base_url, tmp_path)
        out, err = await asyncio.wait_for(
            third.communicate(b"How should you format answers for me?\n"), 60
        )
        assert third.returncode == 0, err.decode()
        assert b"- like this" in out
        system = memory_text(fake.requests_of("chat")[-1].body)
        assert PREFERENCE in system
        # The earlier exchange is still in the history too.
        first_message = fake.requests_of("chat")[-1].body["messages"][0]
        assert "I prefer answers in bullet points" in str(first_message)


PORTO = "The user lives in Porto."
LINE = "I moved to Porto last month"
CUT_NOTE = b"(answering your last message, cut off by a crash: I moved to Porto last month)"
FAILED_NOTE = b"(answering your last message, which got no answer: I moved to Porto last month)"


async def killed_mid_answer(db: str, fake: FakeAnthropic, cwd: Path, line: str = LINE) -> bytes:
    """A chat process killed (SIGKILL) while an answer streams: to ``line`` typed (or, with
    ``line`` empty, to what it answers at start); returns what it wrote."""
    long_answer = " ".join(f"word{i}" for i in range(300))
    fake.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
    first = await chat_process(db, fake.base_url, cwd)
    assert first.stdin is not None and first.stdout is not None
    if line:
        first.stdin.write(f"{line}\n".encode())
        await first.stdin.drain()
    shown = b""
    while b"word3" not in shown:  # the answer is streaming
        shown += await asyncio.wait_for(first.stdout.read(64), 30)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    return shown


async def restarted(db: str, fake: FakeAnthropic, cwd: Path, user: str = "alice") -> bytes:
    """Start a chat process with no input (start, drain, exit 0); returns what it wrote."""
    process = await chat_process(db, fake.base_url, cwd, user)
    out, err = await asyncio.wait_for(process.communicate(b""), 60)
    assert process.returncode == 0, err.decode()
    return out


@pytest.mark.slow
async def test_sigkill_mid_answer_then_a_restart_answers_the_line_once(
    tmp_path: Path, db_url: str
) -> None:
    """The line a kill left unanswered is answered at the next start, once (as Slack and
    Discord do: ``core.chat.intake``), then reflected as any delivered answer; a second
    restart neither answers nor reflects it again (it was: never answered, "type it
    again")."""
    db = db_url  # SQLite and PostgreSQL
    async with running_fake_anthropic() as fake:
        await killed_mid_answer(db, fake, tmp_path)
        out = await restarted(db, fake, tmp_path, user="al")  # another user: not theirs
        assert out == b"" and len(fake.requests_of("chat")) == 1
        fake.enqueue("Porto is a lovely city to live in.", kind="chat")
        fake.enqueue(memories_reply((PORTO, "fact", "general")), kind="extract")
        out = await restarted(db, fake, tmp_path)
        assert out.count(CUT_NOTE) == 1
        assert out.count(b"Porto is a lovely city to live in.") == 1
        assert f"(remembered #1: {PORTO})".encode() in out
        chats = fake.requests_of("chat")
        assert len(chats) == 2  # the cut one, and the answer at start-up
        assert LINE in str(chats[-1].body["messages"][-1])

        out = await restarted(db, fake, tmp_path)  # a second restart: nothing again
        assert b"cut off by a crash" not in out and b"remembered" not in out
        assert len(fake.requests_of("chat")) == 2
        assert len(fake.requests_of("extract")) == 1
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert [(t.role, t.text) for t in turns] == [
            ("user", LINE),
            ("assistant", "Porto is a lovely city to live in."),
        ]
        assert turns[0].reflection == "done"
        assert [m.text for m in await store.list_memories(user_key="cli:alice")] == [PORTO]
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_recovery_killed_too_is_answered_at_the_next_start(
    tmp_path: Path, db_url: str
) -> None:
    """The double crash: killed mid-answer, then killed again while the start-up answers the
    line; the third start answers it, once, and a fourth does nothing."""
    db = db_url  # SQLite and PostgreSQL
    async with running_fake_anthropic() as fake:
        await killed_mid_answer(db, fake, tmp_path)
        shown = await killed_mid_answer(db, fake, tmp_path, line="")  # the recovery, cut
        assert shown.count(CUT_NOTE) == 1
        fake.enqueue("Porto is a lovely city to live in.", kind="chat")
        fake.enqueue(memories_reply((PORTO, "fact", "general")), kind="extract")
        out = await restarted(db, fake, tmp_path)
        assert out.count(CUT_NOTE) == 1
        assert out.count(b"Porto is a lovely city to live in.") == 1
        assert len(fake.requests_of("chat")) == 3
        out = await restarted(db, fake, tmp_path)
        assert b"cut off by a crash" not in out
        assert len(fake.requests_of("chat")) == 3
        assert len(fake.requests_of("extract")) == 1
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert [t.role for t in turns] == ["user", "assistant"]
        assert [m.text for m in await store.list_memories(user_key="cli:alice")] == [PORTO]
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_line_another_live_chat_is_answering_is_not_answered_again(
    tmp_path: Path, db_url: str
) -> None:
    """A second chat of the same user, opened while the first one's answer streams, leaves
    that line to the first (it is not cut); once the first is killed, the next start
    answers it, once."""
    db = db_url  # SQLite and PostgreSQL
    async with running_fake_anthropic() as fake:
        long_answer = " ".join(f"word{i}" for i in range(300))
        fake.enqueue(Reply(text=long_answer, chunk_size=4, chunk_delay_s=0.05), kind="chat")
        first = await chat_process(db, fake.base_url, tmp_path)
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write(f"{LINE}\n".encode())
        await first.stdin.drain()
        shown = b""
        while b"word3" not in shown:
            shown += await asyncio.wait_for(first.stdout.read(64), 30)
        try:
            out = await restarted(db, fake, tmp_path)  # while the first still answers
            assert b"cut off by a crash" not in out
            assert len(fake.requests_of("chat")) == 1
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        fake.enqueue("Porto is a lovely city to live in.", kind="chat")
        out = await restarted(db, fake, tmp_path)
        assert out.count(CUT_NOTE) == 1
        assert len(fake.requests_of("chat")) == 2


@pytest.mark.slow
async def test_sigkill_mid_answer_then_a_failed_recovered_answer_is_never_reflected(
    tmp_path: Path, db_url: str
) -> None:
    """Reflection waits for a delivered answer: a line whose answer a kill cut, and whose
    answer at the next start fails (a 400), is never learned from; nothing of it showed, so
    a later start asks again (as Slack and Discord do), and a failure there is not learned
    from either."""
    db = db_url  # SQLite and PostgreSQL
    async with running_fake_anthropic() as fake:
        await killed_mid_answer(db, fake, tmp_path)
        fake.enqueue(Reply(status=400, error_type="invalid_request_error"), kind="chat")
        fake.enqueue(memories_reply((PORTO, "fact", "general")), kind="extract")
        process = await chat_process(db, fake.base_url, tmp_path)
        out, _ = await asyncio.wait_for(process.communicate(b""), 60)
        assert out.count(CUT_NOTE) == 1
        assert b"remembered" not in out
        assert process.returncode == 1  # piped: a message got no answer
        assert len(fake.requests_of("chat")) == 2

        fake.enqueue(Reply(status=400, error_type="invalid_request_error"), kind="chat")
        process = await chat_process(db, fake.base_url, tmp_path)
        out, _ = await asyncio.wait_for(process.communicate(b""), 60)
        assert out.count(FAILED_NOTE) == 1 and b"cut off by a crash" not in out
        assert process.returncode == 1
        assert len(fake.requests_of("chat")) == 3
    assert fake.requests_of("extract") == []
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert [(t.role, t.text, t.reflection) for t in turns] == [("user", LINE, "off")]
        assert await store.list_memories(user_key="cli:alice") == []
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_line_whose_answer_failed_before_showing_is_answered_at_the_next_start(
    tmp_path: Path, db_url: str
) -> None:
    """A typed line whose answer failed with nothing of it shown (a 400) is answered at the
    next start, once, through the same intake as a line a crash cut (as Slack and Discord
    ask again what showed nothing); it stays unreflected (its turn was marked so when the
    answer failed, as there). A line whose failed answer showed a part (stored, marked as
    cut) is not asked again."""
    db = db_url  # SQLite and PostgreSQL
    cut_line = "and the tram to the beach"
    async with running_fake_anthropic() as fake:
        fake.enqueue(Reply(status=400, error_type="invalid_request_error"), kind="chat")
        fake.enqueue(
            Reply(text="Trams run along the river all day.", chunk_size=4, cut_after_chunks=2),
            kind="chat",
        )
        process = await chat_process(db, fake.base_url, tmp_path)
        out, _ = await asyncio.wait_for(process.communicate(f"{LINE}\n{cut_line}\n".encode()), 60)
        assert process.returncode == 1  # piped: a message got no answer
        assert b"Porto is" not in out and b"Tram" in out
        assert len(fake.requests_of("chat")) == 2

        fake.enqueue("Porto is a lovely city to live in.", kind="chat")
        out = await restarted(db, fake, tmp_path)
        assert out.count(FAILED_NOTE) == 1 and b"cut off by a crash" not in out
        assert out.count(b"Porto is a lovely city to live in.") == 1
        assert b"tram to the beach" not in out  # its cut answer is stored
        chats = fake.requests_of("chat")
        assert len(chats) == 3 and LINE in str(chats[-1].body["messages"][-1])

        out = await restarted(db, fake, tmp_path)  # answered: nothing again
        assert b"answering your last message" not in out
        assert len(fake.requests_of("chat")) == 3
    assert fake.requests_of("extract") == []
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=9)
        assert [(t.role, t.text) for t in turns] == [
            ("user", LINE),
            ("user", cut_line),
            ("assistant", "Trams ru" + CUT_MARK),
            ("assistant", "Porto is a lovely city to live in."),
        ]
    finally:
        await store.close()


async def killed_at(
    db: str, fake: FakeAnthropic, cwd: Path, when: str, answer: str, line: str = LINE
) -> bytes:
    """A chat killed (SIGKILL) just ``when`` ("before", "after") the answer to ``line``
    typed (or, with ``line`` empty, to what it answers at start) is stored; returns what it
    wrote."""
    fake.enqueue(answer, kind="chat")
    process = await chat_process(db, fake.base_url, cwd, killed_at_store=when)
    typed = f"{line}\n".encode() if line else b""
    out, err = await asyncio.wait_for(process.communicate(typed), 60)
    assert process.returncode == -signal.SIGKILL, err.decode()
    return out


@pytest.mark.slow
async def test_a_kill_between_the_answer_on_screen_and_its_store_never_shows_it_twice(
    tmp_path: Path, db_url: str
) -> None:
    """The answer is stored before its last character is written: killed just before the
    store (of a typed line's answer, then of the answer at the next start), the screen holds
    a cut answer each time, and the third start writes the one whole answer."""
    db = db_url  # SQLite and PostgreSQL
    answers = ("Porto is a lovely city.", "Porto has seven hills.", "Porto is by the sea.")
    async with running_fake_anthropic() as fake:
        first = await killed_at(db, fake, tmp_path, "before", answers[0])
        assert first.startswith(answers[0][:-1].encode())  # it was streaming, cut
        second = await killed_at(db, fake, tmp_path, "before", answers[1], line="")
        assert second.count(CUT_NOTE) == 1
        fake.enqueue(answers[2], kind="chat")
        third = await restarted(db, fake, tmp_path)
        assert third.count(CUT_NOTE) == 1
        out = await restarted(db, fake, tmp_path)  # answered: nothing again
        assert b"answering your last message" not in out
        assert len(fake.requests_of("chat")) == 3
    screen = first + second + third
    assert [screen.count(a.encode()) for a in answers] == [0, 0, 1]  # one whole answer
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert [(t.role, t.text) for t in turns] == [("user", LINE), ("assistant", answers[2])]
    finally:
        await store.close()


@pytest.mark.slow
async def test_a_kill_just_after_the_store_leaves_one_answer_less_its_last_character(
    tmp_path: Path, db_url: str
) -> None:
    """What is left of the window: killed in the instant after the store and before the last
    character is written, the screen shows the answer once without that character; the
    store has it whole, and the next start has nothing to answer."""
    db = db_url  # SQLite and PostgreSQL
    answer = "Porto is a lovely city."
    async with running_fake_anthropic() as fake:
        shown = await killed_at(db, fake, tmp_path, "after", answer)
        assert shown == answer[:-1].encode()
        out = await restarted(db, fake, tmp_path)
        assert b"answering your last message" not in out
        assert len(fake.requests_of("chat")) == 1
    store = await open_store(db)
    try:
        turns = await store.recent_turns(conversation_key="cli:alice:terminal:default", limit=5)
        assert [(t.role, t.text) for t in turns] == [("user", LINE), ("assistant", answer)]
    finally:
        await store.close()
