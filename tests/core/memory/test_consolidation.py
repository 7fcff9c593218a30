"""Consolidation while quiet (issue 37): a night's tidy as one undoable change per user,
its budget stopping it, the window, one process a night, and off by default; both backends,
the fake Anthropic API, a virtual clock (no real waiting)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from core.errors import StoreError
from core.memory.cleanup import Cleaner
from core.memory.consolidation import Consolidator, Window
from core.memory.tidy_notes import last_tidy, undo_tidy
from core.metrics import Metrics
from core.model.claude import ClaudeChatModel
from core.runtime import ChatRuntime, open_runtime, open_store
from core.settings import Settings
from core.store.seams import Store
from core.types import NewMemory, Place, utcnow
from tests.cleanup_helpers import DARK, MERGED, NEW_HOME, OLD_HOME, planner, seed, seed_reminders
from tests.fakes.anthropic_server import FakeAnthropic, running_fake_anthropic
from tests.loop_helpers import harness, settings_for

ALICE, BOB, CAROL = "slack:T1:UALICE", "slack:T1:UBOB", "slack:T1:UCAROL"
ALL_DAY = Window.parse("00:00-00:00")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(responder=planner) as f:
        yield f


def consolidator(
    store: Store, model: object, *, clock: object, enabled: bool = True, **kw: object
) -> Consolidator:
    cleaner = Cleaner(store=store, model=model, batch_size=25, max_batches=5)  # type: ignore[arg-type]
    return Consolidator(
        store=store,
        cleaner=cleaner,
        enabled=enabled,
        window=kw.pop("window", ALL_DAY),  # type: ignore[arg-type]
        daily_tokens=kw.pop("daily_tokens", 1_000_000),  # type: ignore[arg-type]
        min_memories=2,
        clock=clock,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    assert metrics.registry is not None
    value = metrics.registry.get_sample_value(name, labels)
    return value or 0.0


def test_window_parse_and_opened() -> None:
    w = Window.parse("23:00-04:00")
    day = datetime.fromisoformat("2026-12-05T00:00:00+00:00")
    assert w.opened(day + timedelta(hours=23, minutes=30)) == day + timedelta(hours=23)
    assert w.opened(day + timedelta(hours=3)) == day - timedelta(hours=1)
    assert w.opened(day + timedelta(hours=4)) is None
    assert w.opened(day + timedelta(hours=12)) is None
    assert Window.parse("02:00-05:00").opened(day + timedelta(hours=2)) == day + timedelta(hours=2)
    assert ALL_DAY.opened(day + timedelta(hours=13)) == day
    for bad in ("", "2-5", "25:00-01:00", "02:00-05:60", "02:00 - 05:00", "०२:००-०५:००"):
        with pytest.raises(ValueError, match="window"):
            Window.parse(bad)
    with pytest.raises(ValueError, match="consolidation_window"):
        Settings(consolidation_window="02:00-5:00")


async def test_off_by_default_nothing_runs(fake: FakeAnthropic, db_url: str) -> None:
    assert Settings().consolidation is False
    async with harness(fake, db_url) as h:
        await seed(h.store, ALICE)
        now = utcnow()
        off = consolidator(h.store, h.model, clock=lambda: now, enabled=False)
        assert await off.run_night() is None
        # nothing claimed, nothing spent, nothing changed
        assert await h.store.mark_once(mark=f"tidy:{now.date().isoformat()}") is True
        assert fake.requests_of("extract") == []
        assert await h.store.count(user_key=ALICE) == 6
    # the runtime starts no task for it unless the setting is on
    settings = settings_for(fake, db_url)
    async with open_runtime(settings, db_url=db_url, require_model=True, start=False) as rt:
        assert isinstance(rt, ChatRuntime)
        await rt.start()
        assert rt._consolidation is None
    on = settings_for(fake, db_url).model_copy(update={"consolidation": True})
    async with open_runtime(on, db_url=db_url, require_model=True, start=False) as rt:
        assert isinstance(rt, ChatRuntime)
        await rt.start()
        assert rt._consolidation is not None and not rt._consolidation.done()


async def test_a_night_tidies_each_active_user_as_one_undoable_change(
    fake: FakeAnthropic, db_url: str
) -> None:
    async with harness(fake, db_url) as h:
        await seed(h.store, ALICE)
        await h.store.add_many(
            user_key=BOB, memories=[NewMemory(text="The user likes jazz.")], dedupe=None
        )  # too few memories to tidy
        now = utcnow()
        metrics = Metrics.create()
        # one Metrics for the model and the night, as the runtime wires them
        async with ClaudeChatModel.from_settings(h.settings, metrics=metrics) as model:
            night = consolidator(h.store, model, clock=lambda: now, metrics=metrics)
            report = await night.run_night()
        assert report is not None and report.stopped is None and report.failed == 0
        (alice,) = report.users
        assert alice.user_key == ALICE and alice.change_id is not None
        assert alice.change_id.startswith(f"tidy-{now:%Y%m%d}-")
        assert alice.tidied == 4 and alice.calls >= 1 and alice.tokens > 0
        texts = {m.text for m in await h.store.list_memories(user_key=ALICE)}
        assert texts == {MERGED, NEW_HOME, "The user has a cat named Miso."}
        # counted in metrics and in the usage report, on its own line (not as cleanup)
        assert sample(metrics, "selfmind_consolidation_changes_total", op="users") == 1
        assert sample(metrics, "selfmind_consolidation_changes_total", op="merged") == 3
        assert sample(metrics, "selfmind_consolidation_changes_total", op="superseded") == 1
        usage = {r.key: r for r in await h.store.usage_report(since=now - timedelta(hours=1))}
        assert "cleanup" not in usage
        assert usage["consolidation"].calls == alice.calls
        assert usage["consolidation"].total_tokens == alice.tokens
        # and its tokens on their own line in Prometheus too, as the usage report counts them
        tokens = {
            kind: sample(metrics, "selfmind_claude_tokens_total", call="consolidation", kind=kind)
            for kind in ("input", "output", "cache_read", "cache_write")
        }
        line = usage["consolidation"]
        assert tokens == {
            "input": line.input_tokens,
            "output": line.output_tokens,
            "cache_read": line.cache_read_input_tokens,
            "cache_write": line.cache_creation_input_tokens,
        }
        assert tokens["input"] > 0 and tokens["output"] > 0
        for other in ("cleanup", "reflection", "extract"):
            assert sample(metrics, "selfmind_claude_tokens_total", call=other, kind="input") == 0
        # what /memory and the Home tab say, and the undo they offer
        note = await last_tidy(h.store, user_key=ALICE, now=now)
        assert note is not None and (note.change_id, note.tidied) == (alice.change_id, 4)
        assert await last_tidy(h.store, user_key=BOB, now=now) is None
        assert await last_tidy(h.store, user_key=ALICE, now=now + timedelta(days=2)) is None
        # the same night again: claimed, nothing runs
        assert await night.run_night() is None
        assert await undo_tidy(h.store, user_key=ALICE, change_id=alice.change_id) == 4
        texts = {m.text for m in await h.store.list_memories(user_key=ALICE)}
        assert texts == {*DARK, OLD_HOME, NEW_HOME, "The user has a cat named Miso."}
        assert await last_tidy(h.store, user_key=ALICE, now=now) is None
        with pytest.raises(Exception, match="already undone"):
            await undo_tidy(h.store, user_key=ALICE, change_id=alice.change_id)
        for bad in ("", "0" * 12, "tidy-" + "x" * 80, "tidy-nope"):
            with pytest.raises(StoreError, match="change"):
                await undo_tidy(h.store, user_key=ALICE, change_id=bad)
        with pytest.raises(StoreError, match="no change"):  # not Bob's change
            await undo_tidy(h.store, user_key=BOB, change_id=alice.change_id)
        # the next night: the user's only activity was the tidy and its undo, so no call
        calls = len(fake.requests_of("extract"))
        later = now + timedelta(days=1)
        again = consolidator(h.store, h.model, clock=lambda: later)
        report = await again.run_night()
        assert report is not None and report.users == []
        assert len(fake.requests_of("extract")) == calls


async def test_the_daily_budget_stops_the_night(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        for user in (ALICE, BOB, CAROL):
            await seed_reminders(h.store, user, 3)
        now = utcnow()
        metrics = Metrics.create()
        # the first call spends it: no further batch, and the next user is not started
        night = consolidator(h.store, h.model, clock=lambda: now, daily_tokens=1, metrics=metrics)
        report = await night.run_night()
        assert report is not None and report.stopped == "budget"
        assert [u.user_key for u in report.users] == [ALICE]
        assert len(fake.requests_of("extract")) == 1
        assert report.users[0].calls == 1
        assert await h.store.count(user_key=ALICE) < 3  # what was planned is applied
        assert await h.store.count(user_key=BOB) == 3 and await h.store.count(user_key=CAROL) == 3
        assert sample(metrics, "selfmind_consolidation_stops_total", reason="budget") == 1
        # the budget is the deployment's per day: tomorrow's night goes on
        tomorrow = now + timedelta(days=1)
        more = consolidator(h.store, h.model, clock=lambda: tomorrow, daily_tokens=10**9)
        report = await more.run_night()
        assert report is not None and [u.user_key for u in report.users] == [BOB, CAROL]


async def test_the_window_bounds_the_night(fake: FakeAnthropic, db_url: str) -> None:
    async with harness(fake, db_url) as h:
        for user in (ALICE, BOB):
            await seed_reminders(h.store, user, 2)
        start = utcnow()
        opened = start.replace(second=0, microsecond=0) - timedelta(minutes=1)
        window = Window.parse(f"{opened:%H:%M}-{opened + timedelta(minutes=30):%H:%M}")
        outside = consolidator(
            h.store, h.model, clock=lambda: start + timedelta(hours=2), window=window
        )
        assert await outside.run_night() is None and fake.requests_of("extract") == []
        times = iter([start, start, start + timedelta(hours=1)])  # the window closes
        night = consolidator(h.store, h.model, clock=lambda: next(times), window=window)
        report = await night.run_night()
        assert report is not None and report.stopped == "window"
        assert [u.user_key for u in report.users] == [ALICE]
        assert await h.store.count(user_key=BOB) == 2


async def test_one_process_runs_the_night(fake: FakeAnthropic, db_url: str) -> None:
    """Two processes sharing the database (two stores, as two replicas would open)."""
    async with harness(fake, db_url) as h:
        await seed(h.store, ALICE)
        other = await open_store(db_url)
        try:
            now = utcnow()
            a = consolidator(h.store, h.model, clock=lambda: now)
            b = consolidator(other, h.model, clock=lambda: now)
            reports = await asyncio.gather(a.run_night(), b.run_night())
        finally:
            await other.close()
        ran = [r for r in reports if r is not None]
        assert len(ran) == 1 and len(ran[0].users) == 1
        assert len(fake.requests_of("extract")) == ran[0].calls


def test_bench_prints_the_cost_and_the_baseline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from bench import consolidation as bench

    assert bench.main(["--users", "3", "--one", "30", "--data", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    data = json.loads(out[-1])
    one, many = data["one_user"], data["many_users"]
    assert one["memories"] == 30 and 1 <= one["calls"] <= 2 and one["tokens"] > 0
    assert many["users"] == 3 and many["consolidation_calls"] == many["baseline_calls"] == 3
    assert any(line.strip().startswith("ratio (night / old pass)") for line in out)


async def test_the_scheduler_checks_each_tick_and_runs_a_night_once(
    fake: FakeAnthropic, db_url: str
) -> None:
    """``serve`` with a virtual sleep: every tick checks, only the first of the night runs."""
    from core.memory import consolidation

    async with harness(fake, db_url) as h:
        await seed(h.store, ALICE)
        now = utcnow()
        night = consolidator(h.store, h.model, clock=lambda: now)
        ticks: list[float] = []

        async def sleep(seconds: float) -> None:
            ticks.append(seconds)
            if len(ticks) == 3:
                raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await night.serve(sleep=sleep)
        assert ticks == [consolidation.TICK_S] * 3
        calls = len(fake.requests_of("extract"))
        assert calls >= 1
        assert (await last_tidy(h.store, user_key=ALICE, now=now)) is not None
        # another tick the same night: nothing more is sent
        ticks.clear()
        with pytest.raises(asyncio.CancelledError):
            await night.serve(sleep=sleep)
        assert len(fake.requests_of("extract")) == calls


async def test_a_channels_entries_are_never_tidied_at_night(
    fake: FakeAnthropic, db_url: str
) -> None:
    """A channel key owns its entries like a user, but a team's memory changes only through
    its members' announced commands: the night's consolidation never picks a busy channel,
    however many entries it holds (the scheduled cleanup leaves channel keys out by the same
    :func:`core.store.channels.channel_keys`)."""
    channel = Place(platform="slack", kind="public_channel", workspace="T1", channel="C1")
    key = channel.channel_key
    assert key is not None
    async with harness(fake, db_url) as h:
        await h.store.see_channel(place=channel)
        await seed(h.store, key)  # the same near-duplicates a person's tidy merges
        await seed(h.store, ALICE)
        now = utcnow()
        night = consolidator(h.store, h.model, clock=lambda: now)
        assert await night.users_to_tidy(now) == [ALICE]
        report = await night.run_night()
        assert report is not None and [u.user_key for u in report.users] == [ALICE]
        assert len(await h.store.list_memories(user_key=key)) == 6  # untouched
