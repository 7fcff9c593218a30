"""Never acknowledge what was not stored, and answer once: the Slack bot in-process against
the fake Slack (which redelivers unacknowledged events as Slack does), a real SQLite file.

Intake failures are real ones: the database file full (``PRAGMA max_page_count``) and the
write lock held by another connection past the busy timeout (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bots.slack_bot.app import RunningSlackBot
from bots.slack_bot.sink import reply_metadata
from core.errors import NOT_SAVED_COMMAND
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic, slow
from tests.fakes.slack_server import FakeSlack
from tests.slack_helpers import BOT_USER, TEAM, bot_posts, key, running_bot, settle, slack_settings
from tests.store_helpers import fill_disk, free_disk

RETRIES_S = (0.3, 0.6, 1.0)
TEXT = "Please keep the launch checklist in mind"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=8, chunk_delay_s=0.005) as fake:
        yield fake


def store_of(running: RunningSlackBot) -> SQLiteStore:
    store = running.runtime.store
    assert isinstance(store, SQLiteStore)
    return store


def hold_write_lock(db: Path) -> sqlite3.Connection:
    """Another process's write transaction (a CLI import) holding the file's write lock."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


async def user_turns(running: RunningSlackBot, conversation: str) -> list[str]:
    turns = await running.runtime.store.recent_turns(conversation_key=conversation, limit=20)
    return [t.role for t in turns]


async def deliver(slack: FakeSlack, running: RunningSlackBot, event_id: str, text: str) -> None:
    event = slack.events.message(text, user="U1")
    if running.port is not None:
        await slack.deliver_event(
            running.events_url, event, event_id=event_id, retry_delays_s=RETRIES_S
        )
    else:
        await slack.deliver_socket_event(
            event, event_id=event_id, retry_delays_s=RETRIES_S, ack_timeout_s=1.0
        )


@pytest.mark.parametrize("http", [True, False], ids=["http", "socket"])
async def test_a_disk_full_intake_is_not_acked_and_its_redelivery_answered_once(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, http: bool
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    # Long enough to need new pages (overflow pages), so the full file refuses it.
    text = TEXT + " " + "details " * 1500
    async with running_bot(settings, http=http) as running:
        store = store_of(running)
        await fill_disk(store)
        delivery = asyncio.create_task(deliver(slack, running, "EvFULL", text))
        await slack.wait_until(
            lambda: (
                0 in slack.deliveries["EvFULL"] or any(s >= 500 for s in slack.deliveries["EvFULL"])
            ),
            what="a refused delivery",
            timeout_s=10,
        )
        assert await user_turns(running, f"slack:{TEAM}:D1") == []
        assert bot_posts(slack, "D1") == []
        await free_disk(store)  # space again: Slack's retry is stored and answered
        await asyncio.wait_for(delivery, 15)
        await settle(running)
        statuses = slack.deliveries["EvFULL"]
        assert statuses[-1] == 200 and all(s != 200 for s in statuses[:-1])
        assert len(statuses) >= 2
        if http:
            assert statuses[0] == 500
            retry = slack.calls()  # the retries carried X-Slack-Retry-Num (checked below)
            assert retry is not None
        else:
            assert [e["retry_attempt"] for e in slack.envelopes] == list(range(len(statuses)))
        assert await user_turns(running, f"slack:{TEAM}:D1") == ["user", "assistant"]
    assert len(claude.requests_of("chat")) == 1
    assert len(bot_posts(slack, "D1")) == 1


@pytest.mark.parametrize("http", [True, False], ids=["http", "socket"])
async def test_a_lock_timeout_intake_is_not_acked_and_its_redelivery_answered_once(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, http: bool
) -> None:
    db = tmp_path / "m.db"
    settings = slack_settings(slack, claude, db)
    async with running_bot(settings, http=http) as running:
        # The bot waits for the lock this long (30 s in production, past Slack's 3 s ack).
        await store_of(running)._conn.execute("PRAGMA busy_timeout = 300")
        other = hold_write_lock(db)
        try:
            delivery = asyncio.create_task(deliver(slack, running, "EvLOCKED", TEXT))
            await slack.wait_until(
                lambda: bool(slack.deliveries["EvLOCKED"]), what="a refused delivery", timeout_s=10
            )
            assert slack.deliveries["EvLOCKED"][0] != 200
        finally:
            other.rollback()
            other.close()
        await asyncio.wait_for(delivery, 15)
        await settle(running)
        assert slack.deliveries["EvLOCKED"][-1] == 200
        assert await user_turns(running, f"slack:{TEAM}:D1") == ["user", "assistant"]
    assert len(claude.requests_of("chat")) == 1
    assert [p["text"] for p in bot_posts(slack, "D1")][-1].endswith(TEXT)
    assert len(bot_posts(slack, "D1")) == 1


async def test_a_retry_while_the_first_delivery_waits_for_the_lock_shares_its_outcome(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    """Slack retries after 3 s while the first delivery may still wait for the lock: the
    retry must not be acknowledged before the message is stored, nor answered twice."""
    db = tmp_path / "m.db"
    async with running_bot(slack_settings(slack, claude, db)) as running:
        await store_of(running)._conn.execute("PRAGMA busy_timeout = 800")
        event = slack.events.event_callback(slack.events.message(TEXT, user="U1"), event_id="EvW")
        other = hold_write_lock(db)
        try:
            first = asyncio.create_task(slack.send_event(running.events_url, event))
            await asyncio.sleep(0.2)
            retry = asyncio.create_task(slack.send_event(running.events_url, event, retry_num=1))
            both = await asyncio.gather(first, retry)
        finally:
            other.rollback()
            other.close()
        assert [r.status for r in both] == [500, 500]  # neither acknowledged: not stored
        third = await slack.send_event(running.events_url, event, retry_num=2)
        assert third.status == 200
        await settle(running)
    assert len(claude.requests_of("chat")) == 1
    assert len(bot_posts(slack, "D1")) == 1


async def test_remember_that_cannot_be_stored_says_so(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with running_bot(slack_settings(slack, claude, db)) as running:
        await store_of(running)._conn.execute("PRAGMA busy_timeout = 200")
        other = hold_write_lock(db)
        try:
            sent = await slack.send_slash_command(
                running.events_url, "/remember", "The user is allergic to peanuts.", user="U1"
            )
            assert sent.status == 200
            reply = await slack.wait_for_response(sent.sent["response_url"])
        finally:
            other.rollback()
            other.close()
        assert reply["text"] == NOT_SAVED_COMMAND
        assert await running.runtime.service.count(user_key=key("U1")) == 0
        await settle(running)


async def test_remember_is_stored_before_the_acknowledgement(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        sent = await slack.send_slash_command(
            running.events_url, "/remember", "The user is allergic to shellfish.", user="U1"
        )
        assert (sent.status, sent.text) == (200, "")
        # Acknowledged: the memory is already in the store, before any reply was sent.
        assert await running.runtime.service.count(user_key=key("U1")) == 1
        reply = await slack.wait_for_response(sent.sent["response_url"])
        assert reply["text"].startswith("Remembered")
        await settle(running)


# --- exactly once across a crash between showing an answer and storing it


EARLIER_ANSWER = "An earlier answer, to an earlier message."


async def crashed_after_showing(slack: FakeSlack, db: Path, event_id: str) -> dict[str, str]:
    """What a process killed between the answer's last edit and storing it leaves: the
    claim, the user's turn without an answer, and the whole answer on Slack (with the
    metadata the bot posts it with). Before it, an earlier exchange, answered and stored."""
    earlier = slack.seed_message("D1", "An earlier message", user="U1")
    slack.seed_message(
        "D1", EARLIER_ANSWER, user=BOT_USER, bot_id="B0BOT", metadata=reply_metadata(earlier["ts"])
    )
    event = slack.events.message("What did we decide about the launch?", user="U1")
    slack.seed_message("D1", event["text"], user="U1", ts=event["ts"], channel_type="im")
    slack.seed_message(
        "D1",
        "You said: What did we decide about the launch?",
        user=BOT_USER,
        bot_id="B0BOT",
        metadata=reply_metadata(event["ts"]),
    )
    store = await SQLiteStore.open(str(db))
    try:
        assert await store.claim_event(keys=[f"event:{event_id}", f"msg:D1:{event['ts']}"])
        assert await store.mark_once(mark=f"slack-dm-notice:{key('U1')}")
        await store.add_turn(
            turn=NewTurn(
                conversation_key=f"slack:{TEAM}:D1",
                user_key=key("U1"),
                role="user",
                text=event["text"],
                origin="private",
                sent_at=datetime.now(UTC),
                reflection="answering",
                platform_ref=event["ts"],
            )
        )
    finally:
        await store.close()
    return event


@pytest.mark.parametrize("redelivered", [False, True], ids=["recovery", "recovery+redelivery"])
async def test_an_answer_shown_but_not_stored_is_not_given_twice_after_a_restart(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, redelivered: bool
) -> None:
    """The replay's double answer: the start-up recovery answered again, in a new message,
    a message whose answer the killed process had already shown. It now takes over the
    message on screen; and a redelivery racing the recovery answers nothing more."""
    db = tmp_path / "m.db"
    event = await crashed_after_showing(slack, db, "EvSHOWN")
    async with running_bot(slack_settings(slack, claude, db)) as running:
        if redelivered:
            envelope = slack.events.event_callback(event, event_id="EvSHOWN")
            sent = await slack.send_event(running.events_url, envelope, retry_num=1)
            assert sent.status == 200
        await slack.wait_until(
            lambda: bool(claude.requests_of("chat")), what="the recovery", timeout_s=10
        )
        await settle(running)
        if redelivered:
            again = slack.events.event_callback(event, event_id="EvSHOWN")
            await slack.send_event(running.events_url, again, retry_num=2)
            await settle(running)
        turns = await running.runtime.store.recent_turns(
            conversation_key=f"slack:{TEAM}:D1", limit=10
        )
    answers = [p for p in bot_posts(slack, "D1") if "What did we decide" in p["text"]]
    assert len(answers) == 1
    assert [p["text"] for p in bot_posts(slack, "D1")] == [EARLIER_ANSWER, answers[0]["text"]]
    assert len(claude.requests_of("chat")) == 1
    assert [t.role for t in turns] == ["user", "assistant"]


async def test_a_first_mention_in_an_unseen_thread_is_stored_before_the_ack(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    root = slack.seed_message("C0GENERAL", "Which queue for the billing jobs?", user="U2")
    claude.enqueue(slow("Use the durable one.", 1.0), kind="chat")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        ask = slack.events.app_mention(
            f"{slack.identity.mention} what do you suggest?", thread_ts=root["ts"]
        )
        ask["user"] = "U1"
        sent = await slack.send_event(running.events_url, ask)
        assert sent.status == 200
        # Acknowledged: the thread so far and the message are stored, the answer not yet.
        turns = await running.runtime.store.recent_turns(
            conversation_key=f"slack:{TEAM}:C0GENERAL:{root['ts']}", limit=10
        )
        assert [(t.user_key, t.text) for t in turns] == [
            (key("U2"), "Which queue for the billing jobs?"),
            (key("U1"), "what do you suggest?"),
        ]
        await settle(running)
    assert len(bot_posts(slack, "C0GENERAL")) == 1
