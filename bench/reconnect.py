"""The fault table: how fast each bot reconnects after each connection fault, and whether every
event sent around it is answered exactly once.

    python bench/reconnect.py [--rounds 5] [--json]

Slack: the real ``selfmind slack`` process (Socket Mode) against the fake Slack, with
``redeliver_unacked`` on (Slack redelivers what was not acknowledged) and reconnect backoff
50 ms first, 0.5 s at most; each round applies the fault, waits for the next accepted
websocket (the reconnect time) and sends one DM; "abrupt close mid-event" sends the DM on the
connection it then resets. Discord: the bot in this process (composed as ``selfmind discord``
composes it) against the fake gateway, with the same backoff settings; each round sends one
message while the gateway is down (replayed on RESUME) and one once it is back; reconnect
time runs from the fault to the RESUME (or IDENTIFY). The baseline row of each platform,
"no fault", sends the same events on a steady connection: every fault row should match its
answered / twice / lost counts.

Baseline for the Slack link itself (``--sdk-baseline``, platform ``slack-sdk``): the same
faults, one round each on a fresh connection, against slack_bolt's own
``AsyncSocketModeHandler`` (slack_sdk's aiohttp client, what the bot used before) over a Bolt
app whose listener only acknowledges; "answered" there means acknowledged, and a fault it does
not recover from within 15 s counts as lost with its reconnect time shown as "stuck".

Columns: reconnect p50 / max (seconds), events sent, answered (at least once), answered
twice (or more), lost (never answered within 30 s). The last line is JSON:
``{"rows": [{platform, fault, reconnect_p50_s, reconnect_max_s, sent, answered,
answered_twice, lost}], "exactly_once": bool}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.discord_helpers import running_bot, world
from tests.fakes.anthropic_server import running_fake_anthropic
from tests.fakes.slack_server import running_fake_slack
from tests.reconnect_helpers import (
    DISCORD_FAULTS,
    SLACK_FAULTS,
    BotProcess,
    DiscordFaultRun,
    SlackFaultRun,
    socket_mode_env,
)

Row = dict[str, object]


async def slack_rows(rounds: int, tmp: Path) -> list[Row]:
    async with running_fake_slack() as slack, running_fake_anthropic() as claude:
        slack.redeliver_unacked = True
        bot = await BotProcess.start(tmp / "slack.db", socket_mode_env(slack, claude), REPO)
        try:
            run = SlackFaultRun(slack)
            for _ in range(rounds):
                await run.send_event("no fault")
            for _ in range(rounds):
                for fault in SLACK_FAULTS:
                    await run.apply(fault)
                    await run.send_event(fault)
                await run.mid_event()
            await run.wait_answered()
            rows = run.rows()
        finally:
            await bot.stop()
    return [{"platform": "slack"} | row for row in rows]


async def discord_rows(rounds: int, tmp: Path) -> list[Row]:
    fast = {"reconnect_backoff_s": 0.05, "reconnect_backoff_max_s": 0.5}
    async with world(tmp) as w, running_bot(w, **fast):
        run = DiscordFaultRun(w.discord, w.alice)
        for _ in range(2 * rounds):
            await run.send("no fault")
        for _ in range(rounds):
            for fault in DISCORD_FAULTS:
                await run.apply(fault, timeout_s=600)
        await run.wait_answered()
        rows = run.rows()
    return [{"platform": "discord"} | row for row in rows]


SDK_STUCK_S = 15.0


async def sdk_rows() -> list[Row]:
    """One round of each Slack fault against slack_bolt's ``AsyncSocketModeHandler``."""
    return [await sdk_row(fault) for fault in [*SLACK_FAULTS, "abrupt close mid-event"]]


async def sdk_row(fault: str) -> Row:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.web.async_client import AsyncWebClient

    async with running_fake_slack() as slack:
        slack.redeliver_unacked = True
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        quiet = logging.getLogger("bench.reconnect.sdk")  # its tracebacks are the point,
        quiet.setLevel(logging.CRITICAL + 1)  # not worth printing
        app = AsyncApp(client=client, signing_secret=slack.signing_secret, logger=quiet)

        async def on_message() -> None:
            return None

        app.event("message")(on_message)
        handler = AsyncSocketModeHandler(
            app, app_token=slack.app_token, ping_interval=1.0, logger=quiet
        )
        await handler.connect_async()  # type: ignore[no-untyped-call]
        reconnect: object = "stuck"
        acked = 0
        try:
            await slack.wait_for_socket()
            before = slack.socket_connections
            started = asyncio.get_running_loop().time()
            event = slack.events.message("after the fault", user="U9")
            if fault == "abrupt close mid-event":
                await slack.push_then_drop("events_api", slack.events.event_callback(event))
            else:
                await SLACK_FAULTS[fault](slack)
            with contextlib.suppress(TimeoutError):
                await slack.wait_until(
                    lambda: slack.socket_connections > before, timeout_s=SDK_STUCK_S
                )
                reconnect = round(asyncio.get_running_loop().time() - started, 3)
            if reconnect != "stuck":
                if fault != "abrupt close mid-event":
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await slack.push_event(event)
                with contextlib.suppress(TimeoutError):
                    await slack.wait_until(
                        lambda: any(
                            slack_event_of(slack, str(a["envelope_id"])) == "U9" for a in slack.acks
                        ),
                        timeout_s=5,
                    )
                    acked = 1
        finally:
            await handler.close_async()  # type: ignore[no-untyped-call]
    return {
        "platform": "slack-sdk",
        "fault": fault,
        "reconnect_p50_s": reconnect,
        "reconnect_max_s": reconnect,
        "sent": 1,
        "answered": acked,
        "answered_twice": 0,
        "lost": 1 - acked,
    }


def slack_event_of(slack: object, envelope_id: str) -> str | None:
    """The user of the ``events_api`` envelope ``envelope_id`` the fake sent, if any."""
    for envelope in getattr(slack, "envelopes", []):
        if envelope.get("envelope_id") == envelope_id:
            return str(envelope.get("payload", {}).get("event", {}).get("user"))
    return None


def table(rows: list[Row]) -> str:
    head = ("platform", "fault", "p50 s", "max s", "sent", "answered", "twice", "lost")
    keys = (
        "platform",
        "fault",
        "reconnect_p50_s",
        "reconnect_max_s",
        "sent",
        "answered",
        "answered_twice",
        "lost",
    )
    cells = [
        [str(r[k]) if r["fault"] != "no fault" or "reconnect" not in k else "-" for k in keys]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


async def main_async(rounds: int, platforms: list[str], sdk: bool) -> list[Row]:
    rows: list[Row] = await sdk_rows() if sdk else []
    with tempfile.TemporaryDirectory() as tmp:
        if "slack" in platforms:
            rows += await slack_rows(rounds, Path(tmp))
        if "discord" in platforms:
            rows += await discord_rows(rounds, Path(tmp))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="times each fault is applied")
    parser.add_argument("--platform", choices=("slack", "discord"), action="append")
    parser.add_argument("--sdk-baseline", action="store_true", help="also slack_sdk's client")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    platforms = args.platform or ["slack", "discord"]
    rows = asyncio.run(main_async(args.rounds, platforms, args.sdk_baseline))
    ours = [r for r in rows if r["platform"] != "slack-sdk"]
    once = all(r["answered"] == r["sent"] and r["answered_twice"] == 0 for r in ours)
    if not args.json:
        print(table(rows))
    print(json.dumps({"rows": rows, "exactly_once": once}))
    sys.exit(0 if once else 1)


if __name__ == "__main__":
    main()
