"""Where a Slack message or command was said (bots.slack_bot.places): the kind from the
event's channel_type or conversations.info, the workspace rule (enterprise, Slack Connect)."""

from __future__ import annotations

from typing import Any

from slack_sdk.errors import SlackApiError

from bots.slack_bot.places import ChannelKinds, home_place, kind_by_id, slack_workspace
from core.types import Place


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


def test_the_home_tab_is_the_persons_own_dm() -> None:
    assert home_place(team="T1", enterprise=None) == Place("slack", "dm", "T1")
    assert home_place(team="T1", enterprise="E1").workspace == "E1"
