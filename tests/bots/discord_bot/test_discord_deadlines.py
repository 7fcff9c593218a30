"""Discord's interaction deadlines, which the fake enforces: the first response within 3 s
("Unknown interaction", 10062), followups and edits within the token's 15 minutes ("Unknown
Webhook", 10015; https://discord.com/developers/docs/interactions/receiving-and-responding).
A slow store or embedding makes ``/remember`` and ``/memories search`` defer and follow up;
an interaction that expired anyway ends with one logged line; the cleanup plan's buttons
stop 14 minutes after the command arrived, planning included, so the plan is still marked
expired with the command's token (both windows scaled down here)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from bots.discord_bot import cleanup
from core.memory.replies import SEARCH_HEADER
from core.memory.service import MemoryService
from tests.cleanup_helpers import planner, seed
from tests.discord_helpers import World, command, final_text, key, running_bot, world

pytestmark = pytest.mark.usefixtures("no_errors")

SLOW_S = 3.2
"""Past Discord's 3 s for the first response."""


def slow_down(service: MemoryService, method: str, delay_s: float, mp: pytest.MonkeyPatch) -> None:
    """Make ``service.<method>`` take ``delay_s`` longer (a slow store or embedding)."""
    original = getattr(service, method)

    async def slow(**kwargs: Any) -> Any:
        await asyncio.sleep(delay_s)
        return await original(**kwargs)

    mp.setattr(service, method, slow)


@pytest.mark.parametrize(
    ("name", "method", "options", "answer"),
    [
        ("remember", "remember", {"text": "My dog is Pixel."}, "Remembered (`#2`)"),
        ("memories search", "search", {"query": "tabs"}, SEARCH_HEADER),
    ],
)
async def test_a_slow_store_defers_and_the_answer_follows(
    w: World,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    method: str,
    options: dict[str, str],
    answer: str,
) -> None:
    async with running_bot(w) as bot:
        await bot.rt.service.remember(user_key=key(w.alice), text="I prefer tabs over spaces.")
        slow_down(bot.rt.service, method, SLOW_S, monkeypatch)
        interaction, response = await command(w.discord, name, w.alice, **options)
        assert (response.type, response.ephemeral) == (5, True)  # deferred, in time
        assert (await final_text(w.discord, interaction)).startswith(answer)


@pytest.mark.parametrize(
    ("deadline_s", "slow_s"),
    [(0.5, 1.0), (1.0, 2.0)],  # the answer comes too late; the defer comes too late
)
async def test_an_interaction_that_expired_anyway_ends_with_one_line_and_stores_all(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    deadline_s: float,
    slow_s: float,
) -> None:
    options: dict[str, Any] = {"interaction_response_timeout_s": deadline_s}
    async with world(tmp_path, **options) as w, running_bot(w) as bot:
        slow_down(bot.rt.service, "remember", slow_s, monkeypatch)
        interaction = await w.discord.dispatch_slash_command(
            "remember", user=w.alice, options={"text": "I like tea."}
        )
        await w.discord.wait_for_request("POST", f"/interactions/{interaction.id}/*")
        await asyncio.sleep(slow_s)
        assert await bot.rt.service.count(user_key=key(w.alice)) == 1  # stored all the same
    lines = [r for r in caplog.records if "interaction expired" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("bots")]


async def test_the_cleanup_window_counts_the_planning_and_the_plan_is_marked_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleanup, "VIEW_TIMEOUT_S", 1.5)  # of a 2.5 s token: 14 of 15 minutes

    async def slow_planner(body: dict[str, Any]) -> str:
        await asyncio.sleep(0.4)  # planning takes a while: three calls here
        return planner(body)

    async with world(tmp_path, interaction_token_s=2.5) as w, running_bot(w) as bot:
        w.claude.responder = slow_planner
        await seed(bot.rt.store, key(w.alice))
        interaction, response = await command(w.discord, "memories cleanup", w.alice)
        assert response.type == 5
        await final_text(w.discord, interaction)
        assert interaction.original_message_id is not None
        plan_id = interaction.original_message_id
        await w.discord.wait_for_request(
            "PATCH", f"/webhooks/*/{interaction.token}/messages/@original", timeout_s=4.0
        )
        plan = w.discord.message(plan_id)
        assert plan["content"] == cleanup.EXPIRED and plan["components"] == []
