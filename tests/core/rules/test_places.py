"""The place rule (core.rules.places): pure functions, no store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from core.rules.cleanup_ops import merged_labels
from core.rules.dedupe import Deduper
from core.rules.places import (
    check_reaches,
    merged_place,
    owner_dm,
    parse_place,
    place_key,
    place_of_conversation,
    reach_of,
    turn_place,
    usable,
    usable_reaches,
    widened_place,
)
from core.rules.reassert import decide
from core.types import Place, Turn

DM = Place("slack", "dm", "T1", "D1")
GROUP = Place("slack", "group_dm", "T1", "G1")
PRIVATE = Place("slack", "private_channel", "T1", "C2")
PUBLIC = Place("slack", "public_channel", "T1", "C1")
PUBLIC_2 = Place("slack", "public_channel", "T1", "C3")
OTHER_WS = Place("slack", "public_channel", "T2", "C1")
CONNECT = Place("slack", "public_channel", "connect-C7", "C7")
GUILD_A = Place("discord", "public_channel", "100", "101")
GUILD_B = Place("discord", "public_channel", "200", "201")


def test_the_rule() -> None:
    for learned in (DM, GROUP, PRIVATE, PUBLIC, OTHER_WS, CONNECT, GUILD_A, None):
        assert usable(learned, DM)  # the owner's DM sees everything
        assert usable(learned, None)  # the terminal (no place) is the owner's DM
    assert usable(GROUP, GROUP) and not usable(GROUP, PUBLIC) and not usable(GROUP, PRIVATE)
    assert usable(PRIVATE, PRIVATE) and not usable(PRIVATE, PUBLIC)
    assert not usable(PRIVATE, Place("slack", "private_channel", "T1", "C9"))
    assert usable(PUBLIC, PUBLIC_2)  # the workspace's public channels
    assert not usable(PUBLIC, PRIVATE)  # not its private channels
    assert not usable(PUBLIC, OTHER_WS) and not usable(PUBLIC, CONNECT)
    assert not usable(CONNECT, PUBLIC)
    assert not usable(GUILD_A, GUILD_B) and usable(GUILD_A, GUILD_A)
    assert not usable(None, PUBLIC) and not usable(DM, GROUP)
    assert usable(DM, PUBLIC, private_in_channels=True)  # the operator's opt-in


def test_reach_tokens_are_index_terms() -> None:
    for place in (DM, GROUP, PRIVATE, PUBLIC, CONNECT, GUILD_A, None):
        assert check_reaches([reach_of(place)]) == [reach_of(place)]
    assert reach_of(Place("slack", "public_channel", 'T"1) OR x', "C1")) == "pub_slack_t1orx"
    with pytest.raises(ValueError, match="not a reach token"):
        check_reaches(["pub_slack_t1' OR 1=1"])
    assert usable_reaches(DM) is None and usable_reaches(PUBLIC) == ["pub_slack_t1"]
    assert usable_reaches(GROUP, private_in_channels=True) is None


def test_a_place_is_stored_and_read_back() -> None:
    for place in (DM, GROUP, PRIVATE, PUBLIC, CONNECT, GUILD_A, Place("cli", "dm")):
        assert parse_place(place_key(place)) == place
    for bad in (None, "", "nonsense", "owner:slack:T1:C1", "dm::T1:C1"):
        assert parse_place(bad) is None  # read as the owner's DM


def test_old_conversations_name_the_narrowest_place() -> None:
    assert place_of_conversation("slack:T1:D1", user_key="slack:T1:U1") == owner_dm("slack:T1:U1")
    assert place_of_conversation("slack:T1:G1:1.0", user_key="x").kind == "group_dm"
    assert place_of_conversation("slack:T1:C1:1.0", user_key="x") == Place(
        "slack", "private_channel", "T1", "C1"
    )
    assert place_of_conversation("discord:100:555", user_key="x").kind == "private_channel"
    assert place_of_conversation("discord:dm:9", user_key="discord:1").kind == "dm"
    shared = place_of_conversation("weird", user_key="cli:a", shared=True)
    assert shared.kind == "private_channel"  # said where others read it: never a DM
    turn = Turn(
        id=1, conversation_key="slack:T1:C1:1.0", user_key="slack:T1:U1", role="user", text="x",
        origin="shared", sent_at=datetime(2026, 1, 1, tzinfo=UTC),
    )  # fmt: skip
    assert turn_place(turn).kind == "private_channel"


def test_a_merge_never_widens() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    same = merged_labels([("reflection", "shared", at, place_key(PUBLIC))] * 2)
    assert parse_place(same[3]) == PUBLIC
    mixed = merged_labels(
        [("reflection", "shared", at, place_key(PUBLIC)), ("reflection", "shared", at, None)]
    )
    assert reach_of(parse_place(mixed[3])) == "dm"
    two = merged_labels(
        [
            ("reflection", "shared", at, place_key(GROUP)),
            ("reflection", "shared", at, place_key(PRIVATE)),
        ]
    )
    assert reach_of(parse_place(two[3])) == "dm" and two[1] == "shared"
    assert merged_place([PUBLIC, PUBLIC_2], user_key="slack:T1:U1") == PUBLIC  # one reach


def test_a_dm_memory_said_again_elsewhere_takes_that_place_and_nothing_wider() -> None:
    for said in (GROUP, PRIVATE, PUBLIC, OTHER_WS, CONNECT, GUILD_A):
        assert widened_place(DM, said) == said
        assert widened_place(None, said) == said  # unknown: the owner's DM
    assert widened_place(DM, DM) is None and widened_place(DM, None) is None
    assert widened_place(PUBLIC, PUBLIC_2) is None  # usable there already
    # Learned in a shared place: no one place holds both, so it keeps its own.
    for learned in (GROUP, PRIVATE, OTHER_WS, GUILD_B):
        assert widened_place(learned, PUBLIC if learned != GUILD_B else GUILD_A) is None


@dataclass(frozen=True)
class _Stored:
    id: int
    text: str
    place: Place | None
    about: str | None = None


def test_reassert_widens_only_the_same_fact_of_the_same_person_learned_in_the_dm() -> None:
    tabs = _Stored(1, "The user prefers tabs over spaces.", DM)
    out = decide(Deduper(), text=tabs.text, about=None, place=PUBLIC, known=[tabs])
    assert out.duplicate_of == tabs and out.widen == PUBLIC
    # In other words, still the same fact.
    same = decide(
        Deduper(), text="The user really prefers tabs over spaces.", about=None, place=PUBLIC,
        known=[tabs],
    )  # fmt: skip
    assert same.duplicate_of == tabs and same.widen == PUBLIC
    # Usable there already, or said in the DM: nothing moves.
    assert decide(Deduper(), text=tabs.text, about=None, place=DM, known=[tabs]).widen is None
    public = _Stored(2, tabs.text, PUBLIC)
    kept = decide(Deduper(), text=tabs.text, about=None, place=PUBLIC_2, known=[public])
    assert kept.duplicate_of == public and kept.widen is None
    # A more specific twin is not widened by the general fact: that is stored for the place.
    younger = _Stored(3, "The user has a younger brother.", DM)
    general = decide(
        Deduper(), text="The user has a brother.", about=None, place=PUBLIC, known=[younger]
    )
    assert general.duplicate_of is None and general.widen is None
    # Another person's fact (the manager's) is not the user's, even in the same words.
    manager = _Stored(4, tabs.text, DM, about="manager")
    other = decide(Deduper(), text=tabs.text, about=None, place=PUBLIC, known=[manager])
    assert other.widen is None
    # Learned in a group DM: it keeps its place, and the new one is stored here, said word
    # for word (a copy of its own, one per reach) or reworded.
    group = _Stored(5, tabs.text, GROUP)
    exact = decide(Deduper(), text=tabs.text, about=None, place=PUBLIC, known=[group])
    assert exact.duplicate_of is None and exact.widen is None
    reworded = decide(
        Deduper(), text="The user really prefers tabs over spaces.", about=None, place=PUBLIC,
        known=[group],
    )  # fmt: skip
    assert reworded.duplicate_of is None
    # A twin usable here wins over one that is not.
    both = decide(
        Deduper(), text="The user really prefers tabs over spaces.", about=None, place=PUBLIC_2,
        known=[tabs, public],
    )  # fmt: skip
    assert both.duplicate_of == public and both.widen is None
