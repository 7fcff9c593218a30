"""Files people share in Slack (``file_share``), read for the answer and never kept: over HTTP
and Socket Mode, against the fake Slack's file host (bearer token, redirects) and the fake
Anthropic API (which refuses what the real one would)."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_files import file_share
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.files_helpers import grep_store, pdf, png
from tests.loop_helpers import memories_reply
from tests.slack_helpers import bot_posts, running_bot, settle, shown_text, slack_settings

MARKER = "SLACK-FILE-MARKER-4402"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


def three_files(slack: FakeSlack) -> tuple[list[dict[str, object]], dict[str, bytes]]:
    made = {
        "screenshot.png": png(200, 100, marker=MARKER),
        "report.pdf": pdf(2, marker=MARKER),
        "notes.md": f"# Notes\n- {MARKER}\n".encode(),
    }
    types = {
        "screenshot.png": "image/png",
        "report.pdf": "application/pdf",
        "notes.md": "text/markdown",
    }
    files = [slack.file_host.add(n, d, mimetype=types[n]) for n, d in made.items()]
    return files, made


def chat_content(claude: FakeAnthropic) -> list[dict[str, object]]:
    content = claude.requests_of("chat")[-1].body["messages"][-1]["content"]
    assert isinstance(content, list)
    return content


def assert_exact_blocks(content: list[dict[str, object]], made: dict[str, bytes]) -> None:
    image, pdf_doc, text_doc = (b for b in content if b["type"] in ("image", "document"))
    assert base64.b64decode(image["source"]["data"]) == made["screenshot.png"]  # type: ignore[index]
    assert pdf_doc["title"] == "report.pdf"
    assert base64.b64decode(pdf_doc["source"]["data"]) == made["report.pdf"]  # type: ignore[index]
    assert text_doc["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": made["notes.md"].decode(),
    }


async def test_a_dm_with_files_is_answered_with_them_and_keeps_only_placeholders(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    files, made = three_files(slack)
    claude.enqueue(
        memories_reply(("The user is debugging a boot failure.", "context", "work")), kind="extract"
    )
    async with running_bot(slack_settings(slack, claude, db)) as running:
        event = file_share(slack.events, "What is wrong here?", files, user="U1")
        sent = await slack.send_event(running.events_url, event)
        assert sent.status == 200
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="answer")
        await settle(running)
        assert await running.runtime.reflector.drain(5)

        assert_exact_blocks(chat_content(claude), made)
        # Each download went to url_private with the bot token, redirected on the same host.
        paths = [p for p, _ in slack.file_host.downloads]
        assert len(paths) == 6 and sum("/download/" in p for p in paths) == 3
        assert {auth for _, auth in slack.file_host.downloads} == {f"Bearer {slack.bot_token}"}
        answer = shown_text(bot_posts(slack, "D1")[-1])
        assert "couldn't read" not in answer
        # Stored, reflected and shown to history: the placeholders, never the bytes.
        [turn] = [
            t
            for t in await running.runtime.store.recent_turns(
                conversation_key=f"slack:{slack.identity.team_id}:D1", limit=5
            )
            if t.role == "user"
        ]
        assert turn.text.splitlines()[1:] == [
            "[image: screenshot.png, 1 KB]".replace("1 KB", _size(made["screenshot.png"])),
            f"[pdf: report.pdf, {_size(made['report.pdf'])}]",
            f"[text: notes.md, {len(made['notes.md'])} bytes]",
        ]
        extract = str(claude.requests_of("extract")[-1].body["messages"])
        assert '"name": "screenshot.png"' in extract and MARKER not in extract
        assert grep_store(db, MARKER.encode()) == []
    assert grep_store(db, MARKER.encode()) == []


async def test_bad_files_each_get_a_sentence_and_the_text_is_answered(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    host = slack.file_host
    files = [
        host.add("forbidden.png", png(), mimetype="image/png", behaviour="forbidden"),
        host.add("deleted.pdf", pdf(1), mimetype="application/pdf", behaviour="missing"),
        host.add("moved.png", png(), mimetype="image/png", behaviour="elsewhere"),
        host.add("theirs.pdf", pdf(1), mimetype="application/pdf", behaviour="other_team"),
        host.add("private.png", png(), mimetype="image/png", behaviour="hidden"),
        host.add("huge.pdf", b"%PDF-", mimetype="application/pdf", declared_size=90 << 20),
        host.add("corrupt.png", b"\x89PNG\r\n\x1a\nnope", mimetype="image/png"),
        host.add("budget.xlsx", b"PK\x03\x04" + bytes(range(256)), mimetype="application/zip"),
    ]
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(
            running.events_url, file_share(slack.events, "Still, hello?", files, user="U1")
        )
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="answer")
        await settle(running)
    answer = shown_text(bot_posts(slack, "D1")[-1])
    for line in (
        "I couldn't read forbidden.png: the platform refused the download (403).",
        "I couldn't read deleted.pdf: the platform no longer has it (404).",
        "I couldn't read moved.png: its download led to another site, so I did not follow it.",
        "I couldn't read theirs.pdf: the platform sent a web page instead of the file (no access).",
        "I couldn't read private.png: Slack did not share it with me.",
        "I couldn't read huge.pdf: it is 90.0 MB, over my 20.0 MB limit for a file.",
        "I couldn't read corrupt.png: it is not a readable image.",
        "I couldn't read budget.xlsx: I read images (PNG, JPEG, GIF, WebP), PDFs and text files,"
        " not this kind.",
    ):
        assert line in answer
    assert "You said: Still, hello?" in answer  # the text is answered all the same
    # The token never left the fake's own host; nothing was fetched for the refused ones.
    assert all(p.startswith("/files-pri/") for p, _ in host.downloads)
    assert not any("huge.pdf" in p or "private.png" in p for p, _ in host.downloads)
    assert len(claude.requests_of("chat")) == 1


async def test_socket_mode_mention_in_a_thread_with_files(tmp_path: Path) -> None:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        files, made = three_files(slack)
        settings = slack_settings(slack, claude, tmp_path / "m.db", slack_signing_secret=None)
        async with running_bot(settings, http=False) as running:
            await slack.wait_for_socket()
            root = slack.events.channel_message("a thread", user="U2")
            slack.seed_message("C0GENERAL", "a thread", user="U2", ts=root["ts"])
            mention = slack.events.app_mention(
                f"{slack.identity.mention} read these", user="U1", thread_ts=root["ts"]
            )
            mention["files"] = files
            also = file_share(
                slack.events,
                mention["text"],
                files,
                user="U1",
                channel="C0GENERAL",
                channel_type="channel",
                thread_ts=root["ts"],
                ts=mention["ts"],
            )
            for event in (mention, also):  # a mention arrives twice: answered once
                await slack.wait_for_ack(await slack.push_event(event))
            await slack.wait_until(
                lambda: bool(bot_posts(slack, "C0GENERAL", root["ts"])), what="answer"
            )
            await settle(running)
        assert len(claude.requests_of("chat")) == 1
        assert_exact_blocks(chat_content(claude), made)


async def test_the_fake_file_host_wants_the_bot_token(slack: FakeSlack) -> None:
    from aiohttp import ClientSession

    file = slack.file_host.add("a.txt", b"secret", mimetype="text/plain")
    async with ClientSession() as session:
        async with session.get(str(file["url_private"])) as anonymous:
            assert anonymous.status == 403  # redirected on the same host, then refused
        headers = {"Authorization": f"Bearer {slack.bot_token}"}
        async with session.get(
            str(file["url_private"]), headers=headers, allow_redirects=False
        ) as r:
            assert r.status == 302 and r.headers["Location"].endswith("/download/a.txt")
        async with session.get(str(file["url_private"]), headers=headers) as r:
            assert r.status == 200 and await r.read() == b"secret"


def _size(data: bytes) -> str:
    from core.files.refs import human_size

    return human_size(len(data))


@pytest.mark.parametrize("redelivered", [False, True], ids=["start-up", "redelivery"])
async def test_an_interrupted_answer_with_files_after_a_restart(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, redelivered: bool
) -> None:
    """The process died after storing a message with a file, before answering it. The
    start-up recovery has only the stored text: it answers from the placeholder and says
    so; a redelivery from Slack carries the file again, which is read."""
    from datetime import UTC, datetime

    from core.files import with_placeholders
    from core.files.refs import FileRef
    from core.store.sqlite.store import SQLiteStore
    from core.types import NewTurn

    db = tmp_path / "m.db"
    data = pdf(1, marker=MARKER)
    file = slack.file_host.add("plan.pdf", data, mimetype="application/pdf")
    event = file_share(slack.events, "Check the plan", [file], user="U1")
    store = await SQLiteStore.open(str(db))
    try:
        assert await store.claim_event(keys=["event:EvFILE", f"msg:D1:{event['ts']}"])
        assert await store.mark_once(mark=f"slack-dm-notice:slack:{slack.identity.team_id}:U1")
        await store.add_turn(
            turn=NewTurn(
                conversation_key=f"slack:{slack.identity.team_id}:D1",
                user_key=f"slack:{slack.identity.team_id}:U1",
                role="user",
                text=with_placeholders("Check the plan", [FileRef("plan.pdf", size=len(data))]),
                origin="private",
                sent_at=datetime.now(UTC),
                reflection="answering",
                platform_ref=event["ts"],
            )
        )
    finally:
        await store.close()
    if redelivered:
        # Past the start-up recovery's window (it would answer from the placeholder first: a
        # claim left by a process that is gone no longer holds it back), so the redelivery
        # answers it, with the file it carries again.
        from datetime import timedelta

        from core.chat.intake import RECOVERY_WINDOW
        from core.store.sqlite.base import ts

        old = ts(datetime.now(UTC) - RECOVERY_WINDOW - timedelta(minutes=1))
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE turns SET created_at = ?", (old,))
    if not redelivered:
        async with running_bot(slack_settings(slack, claude, db)) as running:
            await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="the recovery")
            await settle(running)
        answer = shown_text(bot_posts(slack, "D1")[-1])
        assert answer.startswith("_I no longer have plan.pdf (files are never kept)")
        assert isinstance(claude.requests_of("chat")[-1].body["messages"][-1]["content"], str)
        return
    # Slack's redelivery carries the file again.
    async with running_bot(slack_settings(slack, claude, db)) as running:
        envelope = slack.events.event_callback(event, event_id="EvFILE")
        await slack.send_event(running.events_url, envelope, retry_num=1)
        await slack.wait_until(lambda: bool(bot_posts(slack, "D1")), what="the answer")
        await settle(running)
    [request] = claude.requests_of("chat")
    [doc] = [b for b in request.body["messages"][-1]["content"] if b["type"] == "document"]
    assert base64.b64decode(doc["source"]["data"]) == data
    assert "no longer have" not in shown_text(bot_posts(slack, "D1")[-1])
    assert grep_store(db, MARKER.encode()) == []
