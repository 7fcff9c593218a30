"""review3: attacker findings on team memory (each fails on main)."""

from __future__ import annotations

from tests.core.memory.test_team import (
    ALICE,
    CAROL,
    QUESTION,
    fake,  # noqa: F401  (fixture)
    said,
    teach,
    team_reply,
    turn,
)
from tests.fakes.anthropic_server import FakeAnthropic
from tests.loop_helpers import harness

SECRET_PLAN = "The team plans to acquire Initech in March."


async def test_entries_learned_while_private_are_not_used_when_public_again(
    fake: FakeAnthropic,  # noqa: F811
    db_url: str,
) -> None:
    # Memory turned on while the channel was public; the channel is then made private and
    # a confidential decision is learned there; then it is made public again. The entries
    # learned while private must not reach the public channel without a review (the rule
    # of core/memory/team.py's docstring and ChannelInfo.needs_review).
    async with harness(fake, db_url) as h:
        await teach(h, fake)  # public, memory on (memory_kind = public_channel)
        await turn(
            h,
            fake,
            said(ALICE, "we plan to buy Initech in March", kind="private_channel", thread="500.0"),
            team_reply(SECRET_PLAN),
        )
        private = await turn(h, fake, said(CAROL, "what do we plan?", kind="private_channel"))
        assert "Initech" in private  # learned while private, used there
        public = await turn(
            h, fake, said(CAROL, "what do we plan? " + QUESTION, kind="public_channel", thread="600.0")
        )
    assert "Initech" not in public, "a private-time entry reached the public channel unreviewed"
