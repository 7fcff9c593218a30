"""Feedback clicks in Socket Mode: the real bot against the fake Slack's websocket, a real
SQLite file. A click is acknowledged (the envelope's ack) only once stored; the asker's
second click changes the rating; anyone else's click is acknowledged, answered ephemerally
and not stored; a click the store cannot take is not acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.store.sqlite.store import SQLiteStore
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack, JsonDict, running_fake_slack
from tests.slack_helpers import TEAM, bot_posts, running_bot, settle, slack_settings

SINCE = datetime(2020, 1, 1, tzinfo=UTC)
ONLY_THE_ASKER = "Only the person who asked can rate this answer."


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=16) as fake:
        yield fake


def feedback_values(message: JsonDict) -> tuple[str, str]:
    (block,) = [b for b in message.get("blocks") or [] if b["type"] == "context_actions"]
    (element,) = block["elements"]
    return element["positive_button"]["value"], element["negative_button"]["value"]


async def ratings(store: SQLiteStore) -> list[tuple[str | None, int, int]]:
    return [(r.workspace, r.positive, r.negative) for r in await store.feedback_report(since=SINCE)]


async def test_socket_mode_clicks_stored_once_changed_and_only_the_askers(
    claude: FakeAnthropic, tmp_path: Path
) -> None:
    claude.enqueue("The answer worth rating, streamed in a thread.", kind="chat")
    async with running_fake_slack() as slack:
        settings = slack_settings(slack, claude, tmp_path / "m.db", slack_signing_secret=None)
        async with running_bot(settings, http=False) as running:
            await slack.wait_for_socket()
            mention = slack.events.app_mention(f"{slack.identity.mention} rate me", user="U1")
            await slack.wait_for_ack(await slack.push_event(mention))
            await slack.wait_for_call("chat.stopStream", timeout_s=10)
            await settle(running)
            (answer,) = bot_posts(slack, "C0GENERAL", mention["ts"])
            up, down = feedback_values(answer)
            store = running.runtime.store
            assert isinstance(store, SQLiteStore)

            async def click(
                user: str, value: str, user_team: str | None = None
            ) -> tuple[JsonDict, str]:
                payload = slack.events.block_actions(
                    "selfmind_feedback",
                    value,
                    user=user,
                    message_ts=answer["ts"],
                    user_team=user_team,
                )
                acked = await slack.wait_for_ack(await slack.push_envelope("interactive", payload))
                return acked, str(payload["response_url"])

            await click("U1", up)
            assert await ratings(store) == [(TEAM, 1, 0)]  # stored when the ack arrived
            await click("U1", down)  # the asker changes their mind: one row, changed
            assert await ratings(store) == [(TEAM, 0, 1)]

            _, response_url = await click("U2", up)  # someone else's click
            reply = await slack.wait_for_response(response_url)
            assert reply["text"] == ONLY_THE_ASKER
            assert reply.get("response_type") == "ephemeral"
            assert await ratings(store) == [(TEAM, 0, 1)]

            # As an external (Slack Connect) user, with another home team in the click: the
            # rating is keyed as the asker's memory is (the installation's id), one row still.
            await click("U1", up, user_team="T0EXTERNAL")
            assert await ratings(store) == [(TEAM, 1, 0)]
            with contextlib.closing(sqlite3.connect(tmp_path / "m.db")) as db:
                keys = db.execute("SELECT user_key FROM feedback").fetchall()
            assert keys == [(f"slack:{TEAM}:U1",)]


async def test_a_click_the_store_cannot_take_is_not_acknowledged(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    claude.enqueue("An answer to rate while the database is locked.", kind="chat")
    settings = slack_settings(slack, claude, db, slack_signing_secret=None)
    async with running_bot(settings, http=False) as running:
        await slack.wait_for_socket()
        mention = slack.events.app_mention(f"{slack.identity.mention} rate me", user="U1")
        await slack.wait_for_ack(await slack.push_event(mention))
        await slack.wait_for_call("chat.stopStream", timeout_s=10)
        await settle(running)
        (answer,) = bot_posts(slack, "C0GENERAL", mention["ts"])
        up, _ = feedback_values(answer)
        store = running.runtime.store
        assert isinstance(store, SQLiteStore)
        await store._conn.execute("PRAGMA busy_timeout = 300")
        other = sqlite3.connect(db, isolation_level=None)  # another writer holds the lock
        other.execute("BEGIN IMMEDIATE")
        try:
            payload = slack.events.block_actions(
                "selfmind_feedback", up, user="U1", message_ts=answer["ts"]
            )
            envelope = await slack.push_envelope("interactive", payload)
            await asyncio.sleep(1.5)  # the store gave up after 0.3 s: no ack, ever
            assert slack.ack_for(envelope) is None
        finally:
            other.rollback()
            other.close()
        assert await ratings(store) == []
        # the store takes writes again: the next click is stored and acknowledged
        await slack.wait_for_ack(await slack.push_envelope("interactive", payload))
        assert await ratings(store) == [(TEAM, 1, 0)]
