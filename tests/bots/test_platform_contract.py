"""The contract of an adapter's platform description (docs/architecture.md, "What an adapter
provides"), run over every registered platform: an adapter is checked here as soon as its
``bots/<platform>/platform.py`` and its ``selfmind.platforms`` entry point exist."""

from __future__ import annotations

import asyncio
import importlib
import random
from collections.abc import AsyncIterator
from importlib.metadata import entry_points

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.chat.controls import Controls
from core.chat.controls import Place as ControlPlace
from core.platforms import ENTRY_POINT_GROUP, Platform, registered
from core.settings import Settings, load_settings
from core.streaming.reply import ReplyResult, StreamConfig, stream_reply
from tests.conftest import REPO_ROOT
from tests.core.streaming.test_streaming import FakeSink, check_result, long_answer, tokens_of
from tests.fakes.virtual_time import run_virtual

PLATFORMS = sorted(registered().values(), key=lambda p: p.name)
IDS = [p.name for p in PLATFORMS]


def _stream_config(platform: Platform) -> StreamConfig:
    """The adapter's ``stream_config()`` (no arguments: its defaults), from the module that
    holds its description."""
    (point,) = [p for p in entry_points(group=ENTRY_POINT_GROUP) if p.name == platform.name]
    made = importlib.import_module(point.module).stream_config()
    assert isinstance(made, StreamConfig), point.module
    return made


# Keys of every shape, hostile ones included: any of them may reach the pure rules from a
# stored row.
KEY_PART = st.text(min_size=0, max_size=40)
KEY_PARTS = st.lists(KEY_PART, min_size=1, max_size=6)


def test_every_adapter_in_bots_registers_its_one_platform() -> None:
    modules = sorted(REPO_ROOT.glob("bots/*/platform.py"))
    assert len(modules) >= 3, modules
    for path in modules:
        module = importlib.import_module(f"bots.{path.parent.name}.platform")
        described = [v for v in vars(module).values() if isinstance(v, Platform)]
        assert len(described) == 1, f"{path}: one Platform a module"
        assert registered().get(described[0].name) is described[0], (
            f'{path}: add its entry point to [project.entry-points."selfmind.platforms"]'
        )
    assert len(registered()) == len(modules)


@pytest.mark.parametrize("platform", PLATFORMS, ids=IDS)
def test_its_stream_configuration_delivers_every_answer_whole(platform: Platform) -> None:
    """Answers of every length, Markdown and code included, streamed by the adapter's own
    configuration (``stream_config()`` beside its description): each message within its
    limit, together exactly the answer."""
    config = _stream_config(platform)
    max_chars = min(config.max_chars, 4000)
    config = StreamConfig(
        max_chars=max_chars,
        edit_interval_s=config.edit_interval_s,
        writing_marker=config.writing_marker,
        placeholder=config.placeholder,
        status_text=None,
        render=None,  # check_result compares raw text; rendering is tested per adapter
    )
    rng = random.Random(7)
    for chars in (1, 300, 2 * max_chars + 17):
        answer = long_answer(rng, chars)

        async def main(answer: str = answer) -> tuple[FakeSink, ReplyResult]:
            sink = FakeSink(max_chars=max_chars)

            async def deltas() -> AsyncIterator[str]:
                for piece in tokens_of(answer, rng, low=5, high=60):
                    await asyncio.sleep(0.05)
                    yield piece

            return sink, await stream_reply(sink, deltas(), config)

        sink, result = run_virtual(main())
        check_result(result, sink, answer)


@pytest.mark.parametrize("platform", PLATFORMS, ids=IDS)
@settings(max_examples=200, deadline=None)
@given(parts=KEY_PARTS, ref=KEY_PART)
@example(parts=["0", "\x1f"], ref="0")  # links once carried the control character:
@example(parts=["T0", "\x1f", "U0"], ref="0")  # Discord's, Slack's
def test_its_key_rules_take_any_key_without_raising(
    platform: Platform, parts: list[str], ref: str
) -> None:
    keyed = [platform.name, *parts]
    place = platform.conversation_place(keyed)
    assert place is None or (place.platform == platform.name and place.kind != "dm")
    link = platform.message_link(keyed, ref)
    assert link is None or (link.startswith("https://") and link.isprintable())
    workspace = platform.user_workspace(keyed)
    assert workspace is None or workspace in keyed


@pytest.mark.parametrize("platform", PLATFORMS, ids=IDS)
def test_a_dm_key_names_no_shared_place(platform: Platform) -> None:
    """A key of two parts (``{platform}:{user or dm channel}``) is never read as a channel:
    the place rule must never widen a DM's memories."""
    for key in (f"{platform.name}:U1", f"{platform.name}:dm:42", platform.name):
        assert platform.conversation_place(key.split(":")) is None, key


@pytest.mark.parametrize("platform", PLATFORMS, ids=IDS)
def test_its_allow_lists_are_settings_that_admit_and_refuse(platform: Platform) -> None:
    user = f"{platform.name}:W1:U1"
    inside = ControlPlace(platform.name, user, workspace="W1", channel="C1")
    outside = ControlPlace(platform.name, user, workspace="W2", channel="C2")
    if platform.allow_lists is None:
        every_list = {
            name: ("X",)
            for name in Settings.model_fields
            if name.startswith("allowed_") and name != "allowed_users"
        }
        assert every_list, "Settings has allow-lists"
        controls = Controls(load_settings(**every_list), usage=None)  # type: ignore[arg-type]
        assert controls.allows(inside) and controls.allows(outside)
        return
    workspaces, channels = platform.allow_lists
    assert {workspaces, channels} <= set(Settings.model_fields), platform.allow_lists
    open_ = Controls(load_settings(), usage=None)  # type: ignore[arg-type]
    assert open_.allows(outside)
    listed = load_settings(**{workspaces: ("W1",), channels: ("C1",)})
    controls = Controls(listed, usage=None)  # type: ignore[arg-type]
    assert controls.allows(inside)
    assert not controls.allows(outside)
    assert not controls.allows(ControlPlace(platform.name, user, workspace="W1", channel="C2"))
    assert controls.allows(
        ControlPlace(platform.name, user, workspace="W1", channel="D9", private=True)
    )


@pytest.mark.parametrize("platform", PLATFORMS, ids=IDS)
def test_its_mention_names_one_id(platform: Platform) -> None:
    if platform.mention is None:
        assert not platform.channels, "a platform with channels has mentions"
        return
    written = platform.mention.replace("{id}", "U1")
    assert "U1" in written and written != "U1" and "{" not in written
