"""The platform registry (:mod:`core.platforms`): what it refuses, and the neutral answers
the core's rules give a key whose platform no adapter registered."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from importlib.metadata import EntryPoint, EntryPoints

import pytest

import core.platforms
from core.chat.controls import Controls
from core.chat.controls import Place as ControlPlace
from core.metrics import platform_of
from core.platforms import LOCAL, Platform, platform_of_key, registered
from core.rules.links import message_link, speaker
from core.rules.places import owner_dm, place_of_conversation
from core.rules.text import as_data
from core.settings import load_settings
from core.types import Place


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """Entry points of the group as a test sets them (read afresh, restored afterwards)."""
    points: list[EntryPoint] = []
    monkeypatch.setattr(core.platforms, "entry_points", lambda *, group: EntryPoints(tuple(points)))
    registered.cache_clear()
    try:
        yield points
    finally:
        registered.cache_clear()


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=core.platforms.ENTRY_POINT_GROUP)


def test_no_registered_platform_at_all_says_to_reinstall(installed: list[EntryPoint]) -> None:
    with pytest.raises(RuntimeError, match="reinstall"):
        registered()


def test_an_entry_point_that_is_not_a_platform_is_refused(installed: list[EntryPoint]) -> None:
    installed.append(_point("cli", "core.platforms:LOCAL"))
    with pytest.raises(TypeError, match="not a Platform"):
        registered()


def test_an_entry_point_named_unlike_its_platform_is_refused(
    installed: list[EntryPoint],
) -> None:
    installed.append(_point("teams", "bots.terminal.platform:TERMINAL"))
    with pytest.raises(TypeError, match="describes 'cli'"):
        registered()


def test_two_entry_points_for_one_platform_are_refused(installed: list[EntryPoint]) -> None:
    installed.extend([_point("cli", "bots.terminal.platform:TERMINAL")] * 2)
    with pytest.raises(RuntimeError, match="two entry points"):
        registered()


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"name": "", "title": "X"}, "platform name"),
        ({"name": "Teams", "title": "X"}, "platform name"),
        ({"name": "te:ams", "title": "X"}, "platform name"),
        ({"name": "t" * 33, "title": "X"}, "platform name"),
        ({"name": "teams\u200b", "title": "X"}, "platform name"),
        ({"name": "teams", "title": " "}, "needs a title"),
        ({"name": "teams", "title": "Teams", "mention": "<at>"}, "must hold"),
    ],
)
def test_a_malformed_description_is_refused(fields: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Platform(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["teams:T1:U1", "", ":", "Slack:T1:U1", "\x00:T1:U1", "é" * 500])
def test_a_key_of_no_registered_platform_gets_the_neutral_answers(key: str) -> None:
    platform, parts = platform_of_key(key)
    assert platform is None and parts == key.split(":")
    assert platform_of(key) == "other"
    assert owner_dm(key).workspace is None and owner_dm(key).kind == "dm"
    assert place_of_conversation(f"{key}:C1:1.2", user_key=key).kind == "dm"
    assert message_link(parts[0], f"{key}:C1:1.2", "1700000000.000100") is None
    if key:
        assert speaker(key, None) == as_data(key)  # the key as data, never a mention
    controls = Controls(
        load_settings(allowed_slack_teams=("T1",), allowed_discord_guilds=("G1",)),
        usage=None,  # type: ignore[arg-type]
    )
    assert controls.allows(ControlPlace(parts[0], key, workspace="W9", channel="C9"))


def test_the_registered_platforms_answer_for_their_keys() -> None:
    assert set(registered()) >= {"slack", "discord", LOCAL}
    assert owner_dm("slack:T1:U1") == Place(platform="slack", kind="dm", workspace="T1")
    assert owner_dm("discord:42") == Place(platform="discord", kind="dm")
    assert owner_dm("alice") == Place(platform="alice", kind="dm")
    assert owner_dm("") == Place(platform=LOCAL, kind="dm")
    assert platform_of("cli:alice") == LOCAL
    assert speaker("discord:42", None) == "<@42>"


def _teams_place(parts: Sequence[str]) -> Place | None:
    if len(parts) != 4:
        return None
    return Place(platform="teams", kind="private_channel", workspace=parts[1], channel=parts[2])


TEAMS = Platform(
    name="teams",
    title="Microsoft Teams",
    user_workspace=lambda parts: parts[1] if len(parts) == 3 else None,
    conversation_place=_teams_place,
    message_link=lambda parts, ref: f"https://teams.example/{parts[2]}/{ref}",
    mention="<at>{id}</at>",
    allow_lists=("allowed_discord_guilds", "allowed_discord_channels"),  # any two lists
    channels=True,
)
"""A fourth platform, described as an adapter would describe it."""


def test_a_new_platform_is_known_to_every_rule_by_its_description_alone(
    installed: list[EntryPoint],
) -> None:
    installed.append(_point("teams", "tests.core.test_platforms:TEAMS"))
    assert list(registered()) == ["teams"]
    user = "teams:TENANT:AAD1"
    assert owner_dm(user) == Place(platform="teams", kind="dm", workspace="TENANT")
    shared = place_of_conversation("teams:TENANT:CH1:MSG1", user_key=user)
    assert shared == Place("teams", "private_channel", "TENANT", "CH1")
    assert message_link("teams", "teams:TENANT:CH1:MSG1", "m7") == "https://teams.example/CH1/m7"
    assert speaker(user, None) == "<at>AAD1</at>"
    assert platform_of(user) == "teams"
    assert platform_of("slack:T1:U1") == "other"  # only what is registered becomes a label
    controls = Controls(
        load_settings(allowed_discord_guilds=("TENANT",)),
        usage=None,  # type: ignore[arg-type]
    )
    assert controls.allows(ControlPlace("teams", user, workspace="TENANT", channel="CH1"))
    assert not controls.allows(ControlPlace("teams", user, workspace="OTHER", channel="CH1"))
