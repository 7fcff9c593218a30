"""Fixtures of the Slack adapter's tests: the fake Slack Web API, and the bot over HTTP
against it. A test module defines ``claude``, the fake Anthropic API with the replies its
tests need; helpers (not fixtures) live in :mod:`tests.slack_helpers`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.slack_server import FakeSlack, running_fake_slack
from tests.slack_helpers import RunningSlackBot, running_bot, slack_settings


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with running_fake_slack() as fake:
        yield fake


@pytest.fixture
async def bot(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> AsyncIterator[RunningSlackBot]:
    """The bot over HTTP against ``slack`` and the module's ``claude``, on ``m.db``."""
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        yield running
