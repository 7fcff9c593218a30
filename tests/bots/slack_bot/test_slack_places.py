"""Where a Slack message or command was said (bots.slack_bot.places): the kind from the
event's channel_type or conversations.info, the workspace rule (enterprise, Slack Connect)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from bots.slack_bot.places import (
    KIND_TTL_S,
    ChannelKinds,
    home_place,
    kind_by_id,
    slack_workspace,
)
from core.types import Place
from tests.bots.slack_bot.test_slack_home import open_home, texts
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.fakes.slack_server import FakeSlack
from tests.loop_helpers import memories_reply, memory_lines
from tests.slack_helpers import (
    TEAM,
    command,
    key,
    running_bot,
    settle,
    slack_settings,
    system_text,
)


class Client:
    """conversations.info answered from a dict (a missing channel: channel_not_found)."""

    def __init__(self, channels: dict[str, dict[str, Any]]) -> None:
        self.channels = channels
        self.calls = 0

    async def conversations_info(self, *, channel: str) -> dict[str, Any]:
        self.calls += 1
        if channel not in self.channels:
            raise SlackApiError("channel_not_found", {"ok": False, "error": "channel_not_found"})
        return {"ok": True, "channel": {"id": channel} | self.channels[channel]}


def test_the_workspace_is_the_enterprise_where_slack_gives_one() -> None:
    assert slack_workspace(team="T1", enterprise=None, connect=False, channel="C1") == "T1"
    assert slack_workspace(team="T1", enterprise="E1", connect=False, channel="C1") == "E1"
    # A Slack Connect channel is a workspace of its own: never the home workspace's.
    assert slack_workspace(team="T1", enterprise="E1", connect=True, channel="C9") == "connect-C9"


def test_an_unknown_channel_is_the_narrowest_kind() -> None:
    assert kind_by_id("D123") == "group_dm"  # a DM the bot cannot read is not its own
    assert kind_by_id("G123") == "group_dm"
    assert kind_by_id("C123") == "private_channel"


async def test_command_places_from_conversations_info() -> None:
    client = Client(
        {
            "D1": {"is_im": True, "user": "U1"},
            "G1": {"is_mpim": True, "is_private": True},
            "C1": {"is_channel": True, "is_private": True},
            "C2": {"is_channel": True, "is_private": False},
            "C3": {"is_channel": True, "is_private": False, "is_ext_shared": True},
        }
    )
    kinds = ChannelKinds(client)  # type: ignore[arg-type]

    async def place(channel: str, user: str = "U1", enterprise: str | None = None) -> Place:
        return await kinds.place(team="T1", enterprise=enterprise, channel=channel, user=user)

    assert await place("D1") == Place("slack", "dm", "T1", "D1")
    # Another person's command in a DM the bot is in with U1 is not their DM with the bot.
    assert (await place("D1", user="U2")).kind == "group_dm"
    assert (await place("G1")).kind == "group_dm"
    assert (await place("C1")).kind == "private_channel"
    assert await place("C2", enterprise="E1") == Place("slack", "public_channel", "E1", "C2")
    assert await place("C3") == Place("slack", "public_channel", "connect-C3", "C3")
    assert (await place("D404")).kind == "group_dm"  # not found: the narrowest
    calls = client.calls
    await place("C2")
    assert client.calls == calls  # read once per channel


async def test_a_channel_converted_to_private_is_not_taken_for_public() -> None:
    """An admin converts a public channel to a private one (or shares it with another
    organisation): what a later event says replaces the cached kind at once, and a kind read
    from conversations.info is read again after KIND_TTL_S (an app_mention has no
    channel_type: it must not be learned as public for long)."""
    client = Client({"C2": {"is_channel": True, "is_private": False}})
    now = [0.0]
    kinds = ChannelKinds(client, clock=lambda: now[0])  # type: ignore[arg-type]

    async def place() -> Place:
        return await kinds.place(team="T1", enterprise=None, channel="C2", user="U1")

    assert (await place()).kind == "public_channel"
    client.channels["C2"] = {"is_channel": True, "is_private": True}  # converted
    kinds.note("C2", "private_channel", False)  # a message event's channel_type: group
    assert (await place()).kind == "private_channel"
    # Shared with another organisation: its next event says so.
    kinds.note("C2", "private_channel", True)
    assert (await place()).workspace == "connect-C2"
    # No event in between: conversations.info is asked again once the kind is old.
    other = Client({"C3": {"is_channel": True, "is_private": False}})
    kinds = ChannelKinds(other, clock=lambda: now[0])  # type: ignore[arg-type]
    assert (await kinds.place(team="T1", enterprise=None, channel="C3", user="U1")).kind == (
        "public_channel"
    )
    other.channels["C3"]["is_private"] = True
    now[0] += KIND_TTL_S - 1
    assert (await kinds.place(team="T1", enterprise=None, channel="C3", user="U1")).kind == (
        "public_channel"
    )  # cached
    now[0] += 2
    assert (await kinds.place(team="T1", enterprise=None, channel="C3", user="U1")).kind == (
        "private_channel"
    )


def test_the_home_tab_is_the_persons_own_dm() -> None:
    assert home_place(team="T1", enterprise=None) == Place("slack", "dm", "T1")
    assert home_place(team="T1", enterprise="E1").workspace == "E1"


RECOVERY = "The user is in recovery from alcohol addiction."
FALCON = "The user leads Project Falcon."
GROUP, SECRET, OTHER, GENERAL = "G0GROUPDM", "C0SECRET", "C0OTHER", "C0GENERAL"


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=40) as fake:
        yield fake


async def test_a_slack_memory_is_used_only_where_its_owner_may_expect_it(
    slack: FakeSlack, claude: FakeAnthropic, db_url: str
) -> None:
    """Learned in a group DM: never in a public channel (on main it was, as "shared");
    learned in a private channel: in that channel and its threads only; the DM sees all."""
    slack.private_channels |= {SECRET, OTHER}
    async with running_bot(slack_settings(slack, claude, db_url)) as running:  # type: ignore[arg-type]
        url, mention = running.events_url, slack.identity.mention

        async def say(event: dict[str, Any]) -> set[str]:
            before = len(claude.requests_of("chat"))
            assert (await slack.send_event(url, event)).status == 200
            await slack.wait_until(
                lambda: len(claude.requests_of("chat")) > before, what="the answer"
            )
            await settle(running)
            assert running.runtime.reflector is not None
            assert await running.runtime.reflector.drain(10)
            return set(memory_lines(system_text(claude, -1)))

        claude.enqueue(memories_reply((RECOVERY, "fact", "general")), kind="extract")
        await say(slack.events.group_dm_message(f"{mention} I am in recovery", user="U1"))
        claude.enqueue(memories_reply((FALCON, "fact", "general")), kind="extract")
        # An app_mention has no channel_type: the kind is read from conversations.info.
        falcon = slack.events.app_mention(
            f"{mention} I lead Project Falcon", user="U1", channel=SECRET
        )
        await say(falcon)
        places = {
            m.text: m.place
            for m in await running.runtime.service.list_memories(user_key=key("U1"), limit=10)
        }
        assert places == {
            RECOVERY: Place("slack", "group_dm", TEAM, GROUP),
            FALCON: Place("slack", "private_channel", TEAM, SECRET),
        }
        question = "what do you remember about me?"
        public = await say(slack.events.app_mention(f"{mention} {question}", user="U1"))
        assert public == set()  # neither the group DM's nor the private channel's
        in_thread = await say(
            slack.events.message(
                question, user="U1", channel=SECRET, channel_type="group", thread_ts=falcon["ts"]
            )
        )
        assert in_thread == {FALCON}
        elsewhere = await say(
            slack.events.app_mention(f"{mention} {question}", user="U1", channel=SECRET)
        )
        assert elsewhere == {FALCON}  # another thread of the same channel
        other = await say(
            slack.events.app_mention(f"{mention} {question}", user="U1", channel=OTHER)
        )
        assert other == set()
        group = await say(slack.events.group_dm_message(f"{mention} {question}", user="U1"))
        assert group == {RECOVERY}
        assert await say(slack.events.message(question, user="U1")) == {RECOVERY, FALCON}


async def test_slack_connect_and_grid_are_places_like_any_other(
    slack: FakeSlack, claude: FakeAnthropic, db_url: str
) -> None:
    """A fact said in the home workspace's public channel is not used in a Slack Connect
    channel (its own workspace), nor the other way round."""
    async with running_bot(slack_settings(slack, claude, db_url)) as running:  # type: ignore[arg-type]
        url, mention = running.events_url, slack.identity.mention

        async def say(event: dict[str, Any], *, connect: bool = False) -> set[str]:
            before = len(claude.requests_of("chat"))
            envelope = slack.events.event_callback(event) | {"is_ext_shared_channel": connect}
            assert (await slack.send_event(url, envelope)).status == 200
            await slack.wait_until(
                lambda: len(claude.requests_of("chat")) > before, what="the answer"
            )
            await settle(running)
            assert running.runtime.reflector is not None
            assert await running.runtime.reflector.drain(10)
            return set(memory_lines(system_text(claude, -1)))

        claude.enqueue(memories_reply((FALCON, "fact", "general")), kind="extract")
        await say(slack.events.channel_message(f"{mention} I lead Project Falcon", user="U1"))
        claude.enqueue(memories_reply((RECOVERY, "fact", "general")), kind="extract")
        shared = "C0SHARED"
        await say(
            slack.events.channel_message(f"{mention} I am in recovery", user="U1", channel=shared),
            connect=True,
        )
        question = "what do you remember about me?"
        assert await say(
            slack.events.channel_message(f"{mention} {question}", user="U1", channel=shared),
            connect=True,
        ) == {RECOVERY}
        assert await say(
            slack.events.channel_message(f"{mention} {question}", user="U1", channel="C0RANDOM")
        ) == {FALCON}


async def test_a_group_dm_fact_said_word_for_word_in_public_is_known_there_alone(
    slack: FakeSlack, claude: FakeAnthropic, db_url: str
) -> None:
    """/remember in a group DM, then the same sentence in a public channel: known in that
    workspace's public channels and still in the group DM; listed once, and nothing in the
    public channel tells of the group DM's copy; /forget there forgets both."""
    tabs = "The user prefers tabs over spaces."
    slack.group_dms.add(GROUP)
    async with running_bot(slack_settings(slack, claude, db_url)) as running:  # type: ignore[arg-type]
        url, mention = running.events_url, slack.identity.mention
        service = running.runtime.service

        async def ask(event: dict[str, Any]) -> set[str]:
            before = len(claude.requests_of("chat"))
            assert (await slack.send_event(url, event)).status == 200
            await slack.wait_until(
                lambda: len(claude.requests_of("chat")) > before, what="the answer"
            )
            await settle(running)
            return set(memory_lines(system_text(claude, -1)))

        group = await command(slack, running, "/remember", tabs, user="U1", channel=GROUP)
        assert group["text"] == f"Remembered (`#1`): {tabs}"
        public = await command(slack, running, "/remember", tabs, user="U1", channel=GENERAL)
        assert public["text"] == f"Remembered (`#2`): {tabs}"  # nothing of #1 said here
        question = "what do you remember about me?"
        assert await ask(slack.events.app_mention(f"{mention} {question}", user="U1")) == {tabs}
        assert await ask(
            slack.events.app_mention(f"{mention} {question}", user="U1", channel=OTHER)
        ) == {tabs}  # another public channel of the workspace
        assert await ask(slack.events.group_dm_message(f"{mention} {question}", user="U1")) == {
            tabs
        }
        # The owner's listing (/memories, the Home tab's rows) has the sentence once.
        listed = await command(slack, running, "/memories", user="U1", channel="D1")
        assert listed["text"] == "Your memories, newest first (1–1 of 1):"
        assert [m.id for m in await service.list_memories(user_key=key("U1"))] == [2]
        # Every count agrees with it: the Home tab's and the DM prompt's count line.
        assert "*1 memory*" in texts(await open_home(slack, running, "U1"))
        assert await ask(slack.events.message(question, user="U1")) == {tabs}
        assert "1 note is stored about this user" in system_text(claude, -1)
        # Forgotten where it was said in public: forgotten everywhere.
        gone = await command(slack, running, "/forget", "2", user="U1", channel=GENERAL)
        assert gone["text"] == "Forgot `#2`."  # nothing of the group DM's copy
        assert await ask(slack.events.group_dm_message(f"{mention} {question}", user="U1")) == set()
        assert await running.runtime.store.export(user_key=key("U1")) == []
