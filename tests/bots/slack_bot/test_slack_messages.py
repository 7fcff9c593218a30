"""Message kinds the fake Slack delivers as Slack does: only what manifest.yml subscribes to,
group DMs (``message.mpim``) and ``thread_broadcast`` replies; each answered once, in its
thread, as a shared place."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import (
    FakeSlack,
    Unsubscribed,
    manifest_bot_events,
    running_fake_slack,
    subscription_of,
)
from tests.loop_helpers import memory_lines
from tests.slack_helpers import (
    PREFERENCE,
    TEAM,
    bot_posts,
    key,
    running_bot,
    settle,
    slack_settings,
    system_text,
)

GROUP = "G0GROUPDM"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic() as fake:
        yield fake


def test_subscriptions_follow_the_event_and_its_channel_type() -> None:
    events = FakeSlack().events
    assert subscription_of(events.message("hi")) == "message.im"
    assert subscription_of(events.channel_message("hi")) == "message.channels"
    assert subscription_of(events.group_dm_message("hi")) == "message.mpim"
    assert subscription_of(events.message("hi", channel_type="group")) == "message.groups"
    assert subscription_of(events.app_mention("hi")) == "app_mention"
    assert subscription_of(events.tokens_revoked()) == "tokens_revoked"


def test_a_manifest_event_without_its_scope_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(
        "oauth_config:\n  scopes:\n    bot:\n      - chat:write\n"
        "settings:\n  event_subscriptions:\n    bot_events:\n      - message.mpim\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"message\.mpim needs mpim:history"):
        manifest_bot_events(manifest)


async def test_the_fake_delivers_only_subscribed_events(tmp_path: Path) -> None:
    """Slack sends an event only to an app that subscribes to it; the fake refuses to
    deliver any other, over HTTP and Socket Mode (a test could otherwise pass on an event
    Slack never sends, as the revocation tests did before manifest.yml subscribed)."""
    async with running_fake_slack(bot_events=["message.im"]) as slack:
        with pytest.raises(Unsubscribed, match="tokens_revoked"):
            await slack.send_event("http://127.0.0.1:9/never", slack.events.tokens_revoked())
        with pytest.raises(Unsubscribed, match=r"message\.mpim"):
            await slack.push_event(slack.events.group_dm_message("hi"))
        assert slack.envelopes == []
    async with running_fake_slack() as slack:  # manifest.yml's subscriptions
        for event in ("tokens_revoked", "app_uninstalled", "message.mpim", "app_mention"):
            assert event in slack.bot_events


async def test_a_group_dm_is_a_shared_place_answered_when_mentioned(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings) as running:
        await running.runtime.service.remember(user_key=key("U1"), text=PREFERENCE)  # private
        url, mention = running.events_url, slack.identity.mention
        chatter = slack.events.group_dm_message("lunch at noon?", user="U1", channel=GROUP)
        assert (await slack.send_event(url, chatter)).status == 200
        root = slack.events.group_dm_message(f"{mention} summarise our plan", user="U1")
        assert (await slack.send_event(url, root)).status == 200
        await slack.wait_until(lambda: bool(bot_posts(slack, GROUP)), what="the answer")
        follow = slack.events.group_dm_message("and the budget?", user="U2", thread_ts=root["ts"])
        assert (await slack.send_event(url, follow)).status == 200
        await slack.wait_until(lambda: len(bot_posts(slack, GROUP)) == 2, what="follow-up")
        await settle(running)
        posts = bot_posts(slack, GROUP)
        assert [p["thread_ts"] for p in posts] == [root["ts"]] * 2  # in the mention's thread
        assert len(claude.requests_of("chat")) == 2  # the chatter was not answered
        assert memory_lines(system_text(claude, 0)) == []  # a private memory stays out
        turns = await running.runtime.store.recent_turns(
            conversation_key=f"slack:{TEAM}:{GROUP}:{root['ts']}", limit=10
        )
        assert [t.origin for t in turns] == ["shared"] * 4
        assert "group DM" in str(claude.requests_of("chat")[0].body["system"])


async def test_a_thread_broadcast_in_a_followed_thread_is_answered_once(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    settings = slack_settings(slack, claude, tmp_path / "m.db")
    async with running_bot(settings) as running:
        url, mention = running.events_url, slack.identity.mention
        root = slack.events.app_mention(f"{mention} plan the release", user="U1")
        await slack.send_event(url, root)
        await slack.wait_until(lambda: bool(bot_posts(slack, "C0GENERAL")), what="answer")
        await settle(running)
        # "Also send to #general": a thread reply with subtype thread_broadcast, no mention.
        broadcast = slack.events.thread_broadcast(
            "ship it on Friday?", user="U2", thread_ts=root["ts"]
        )
        envelope = slack.events.event_callback(broadcast)
        assert (await slack.send_event(url, envelope)).status == 200
        again = await slack.send_event(url, envelope, retry_num=1)  # a retry: no second one
        assert again.status == 200
        await slack.wait_until(lambda: len(bot_posts(slack, "C0GENERAL")) == 2, what="answer")
        await settle(running)
    posts = bot_posts(slack, "C0GENERAL")
    assert len(posts) == 2 and posts[1]["thread_ts"] == root["ts"]
    assert "ship it on Friday?" in str(claude.requests_of("chat")[-1].body["messages"])
