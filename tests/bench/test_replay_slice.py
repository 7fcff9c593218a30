"""A slice of the LoCoMo replay in the suite: the real Slack bot process, restarts included.

One conversation, its first three sessions, one SIGKILL mid-session: every turn is answered
once (or counted as interrupted, never dropped), every oracle memory is stored for its own
speaker, and nothing errs. Skips when the shared data folder is absent.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from bench.locomo import load_all
from bench.replay_locomo import replay_conversation
from tests.conftest import locomo_or_skip


@pytest.mark.slow
async def test_replay_three_sessions_with_a_sigkill(tmp_path: Path) -> None:
    data = locomo_or_skip()
    (conv,) = load_all(data, ["conv-26"])
    args = argparse.Namespace(sessions=3, restarts=["kill"], questions=None)
    tally = await replay_conversation(conv, args, tmp_path, random.Random(11))
    row = tally.row()
    assert row["errors"] == 0, dict(tally.reasons)
    assert row["answered_twice"] == 0
    assert row["answered"] + row["interrupted"] == row["turns_sent"] > 40
    assert row["interrupted"] <= 1
    assert row["oracle_memories"] > 10
    assert row["lost"] == 0 and row["cross_user"] == 0
    assert row["stored"] + row["merged"] == row["oracle_memories"]
    assert tally.questions == len(conv.questions)
