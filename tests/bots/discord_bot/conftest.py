"""Fixtures of the Discord adapter's tests: both fakes with two users (``w``), the bot
against them, and a check that nothing logged an error. Helpers (not fixtures) live in
:mod:`tests.discord_helpers`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.discord_bot.client import SelfMindBot
from tests.discord_helpers import World, running_bot, world


@pytest.fixture
async def w(tmp_path: Path) -> AsyncIterator[World]:
    """Both fakes and two users (see :func:`world`)."""
    async with world(tmp_path) as w:
        yield w


@pytest.fixture
async def bot(w: World) -> AsyncIterator[SelfMindBot]:
    """The bot, ready, against ``w`` (see :func:`running_bot`)."""
    async with running_bot(w) as bot:
        yield bot


@pytest.fixture
def no_errors(caplog: pytest.LogCaptureFixture) -> Any:
    """Fail the test if the bot or discord.py logged an error (handler crashes included)."""
    caplog.set_level(logging.INFO)
    yield caplog
    errors = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith(("bots", "discord", "core"))
    ]
    assert errors == []
