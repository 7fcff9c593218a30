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
    assert sorted(rows, key=lambda r: (r.day, r.workspace or "")) == [
        FeedbackRow("2026-11-30", "T1", 1, 0),
        FeedbackRow("2026-12-01", None, 1, 0),
        FeedbackRow("2026-12-01", "T1", 0, 1),
        FeedbackRow("2026-12-01", "T2", 1, 0),
    ]
    assert await store.feedback_report(since=DAY2.replace(hour=12)) == []
