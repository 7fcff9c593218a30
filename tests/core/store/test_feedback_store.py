"""Feedback storage (thumbs up / down on answers) on both backends."""

from __future__ import annotations

from datetime import UTC, datetime

from core.store.seams import FeedbackRow, Store

DAY1 = datetime(2026, 11, 30, 23, 59, tzinfo=UTC)
DAY2 = datetime(2026, 12, 1, 0, 1, tzinfo=UTC)


async def test_one_rating_per_user_and_answer_and_a_report_by_day_and_workspace(
    store: Store,
) -> None:
    answer = "slack:T1:C1:1700000000.000100"
    await store.record_feedback(
        answer_ref=answer, user_key="slack:T1:U1", workspace="T1", positive=True, at=DAY1
    )
    # a second click by the same user changes the rating (and its day), never adds one
    await store.record_feedback(
        answer_ref=answer, user_key="slack:T1:U1", workspace="T1", positive=False, at=DAY2
    )
    await store.record_feedback(
        answer_ref="slack:T1:C1:1700000000.000200",
        user_key="slack:T1:U1",
        workspace="T1",
        positive=True,
        at=DAY1,
    )
    await store.record_feedback(
        answer_ref="slack:T2:D9:1.2", user_key="slack:T2:U9", workspace="T2", positive=True, at=DAY2
    )
    await store.record_feedback(
        answer_ref="discord:1:2", user_key="discord:5", workspace=None, positive=True, at=DAY2
    )
    rows = await store.feedback_report(since=datetime(2026, 1, 1, tzinfo=UTC))
    # In this order on both backends (by day, then workspace; none first).
    assert rows == [
        FeedbackRow("2026-11-30", "T1", 1, 0),
        FeedbackRow("2026-12-01", None, 1, 0),
        FeedbackRow("2026-12-01", "T1", 0, 1),
        FeedbackRow("2026-12-01", "T2", 1, 0),
    ]
    assert await store.feedback_report(since=DAY2.replace(hour=12)) == []


async def test_only_a_raters_own_answered_message_can_be_rated(store: Store) -> None:
    from core.types import NewTurn, utcnow

    async def asked(conversation: str, user: str, ref: str) -> int:
        return await store.add_turn(
            turn=NewTurn(
                conversation_key=conversation,
                user_key=user,
                role="user",
                text="question",
                origin="shared",
                sent_at=utcnow(),
                reflection="answering",
                platform_ref=ref,
            )
        )

    thread = "slack:T1:C1:1700000000.000100"
    answered = await asked(thread, "slack:T1:U1", "1700000000.000100")
    await store.finish_turn(turn_id=answered, answer="an answer", reflect=False)
    await asked("slack:T1:D1", "slack:T1:U1", "1700000001.000100")  # never answered
    dm_answered = await asked("slack:T1:D2", "slack:T1:U2", "1700000002.000100")
    await store.finish_turn(turn_id=dm_answered, answer="hi", reflect=False)

    async def may_rate(user: str, ref: str, prefix: str) -> bool:
        return await store.answered_message(
            user_key=user, platform_ref=ref, conversation_prefix=prefix
        )

    assert await may_rate("slack:T1:U1", "1700000000.000100", "slack:T1:C1")  # a thread in C1
    assert await may_rate("slack:T1:U2", "1700000002.000100", "slack:T1:D2")  # the DM itself
    assert not await may_rate("slack:T1:U2", "1700000000.000100", "slack:T1:C1")  # not theirs
    assert not await may_rate("slack:T1:U1", "1700000001.000100", "slack:T1:D1")  # no answer
    assert not await may_rate("slack:T1:U1", "1700000009.000100", "slack:T1:C1")  # no message
    assert not await may_rate("slack:T1:U1", "1700000000.000100", "slack:T1:C")  # C1 is not C
