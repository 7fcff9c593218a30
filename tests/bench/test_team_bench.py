"""bench/team.py: the labelled team cases hold (the decision in the prompt exactly where it
should be), without LoCoMo (the other decisions as the channel's other entries)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.team import load_team_cases, measure_block_tokens, measure_team_cases


def test_the_team_cases_are_balanced() -> None:
    cases = load_team_cases()
    assert len(cases) >= 120
    assert len({c["id"] for c in cases}) == len(cases)
    assert Counter(c["split"] for c in cases)["held_out"] >= len(cases) // 3
    assert {c["category"] for c in cases} == {
        "team_same_channel",
        "team_other_channel",
        "team_dm",
        "team_group_dm",
        "team_other_workspace",
        "team_private_channel",
        "team_private_now_public",
    }


async def test_every_team_case_holds_without_locomo(tmp_path: Path) -> None:
    result = await measure_team_cases(tmp_path / "none")
    assert result["failed"] == []
    assert all(row["n"] == 24 for row in result["categories"].values())
    assert await measure_block_tokens(tmp_path / "none") is None
