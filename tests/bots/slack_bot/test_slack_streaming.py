"""Native streaming on Slack (chat.startStream / appendStream / stopStream) and its fallbacks,
the real bot against the fake over real sockets, in HTTP mode and Socket Mode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bots.slack_bot.sink import REPLY_EVENT_TYPE
from core.store.sqlite.store import SQLiteStore
from core.types import NewTurn
from tests.fakes.anthropic_server import FakeAnthropic, Reply, running_fake_anthropic
from tests.fakes.slack_server import (
    FakeSlack,
    JsonDict,
    render_markdown_text,
    running_fake_slack,
)
from tests.slack_helpers import (
    TEAM,
    bot_posts,
    running_bot,
    settle,
    shown_text,
    slack_settings,
)

PARAGRAPH = "Streaming shows the answer as it is written, a few words at a time. "


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with running_fake_anthropic(chunk_size=16) as fake:
        yield fake


def answer_of(n_chars: int) -> str:
    text = (PARAGRAPH * (n_chars // len(PARAGRAPH) + 1))[:n_chars]
    return text.rstrip() + "."


def replies(slack: FakeSlack, channel: str, root: str) -> list[JsonDict]:
    return [m for m in bot_posts(slack, channel, root) if m["ts"] != root]


def whole(messages: list[JsonDict]) -> str:
    return "".join(shown_text(m) for m in messages)


async def test_dm_thread_answer_streams_natively_with_metadata(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    answer = answer_of(1500)
    claude.enqueue(answer, kind="chat")
    root = slack.seed_message("D1", "start a thread", user="U1")
    follow = slack.events.message("tell me more", user="U1", thread_ts=root["ts"])
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, follow)
        await slack.wait_for_call("chat.stopStream", timeout_s=10)
        await settle(running)
        start = slack.calls("chat.startStream")[0].params
        assert start["thread_ts"] == root["ts"]
        assert slack.calls("chat.update") == []
        assert slack.calls("chat.postMessage") == []
        (message,) = replies(slack, "D1", root["ts"])
        notice, _, shown = shown_text(message).partition("\n\n")
        assert notice.startswith("_I remember") and shown == answer  # first DM: privacy line
        assert message["streaming"] is False
        assert message["metadata"]["event_type"] == REPLY_EVENT_TYPE
        assert message["metadata"]["event_payload"] == {"answers_ts": follow["ts"]}
        # appends buffered by the SDK helper: far fewer calls than deltas
        assert len(slack.calls("chat.appendStream")) < len(answer) // 16
        turns = await running.runtime.store.recent_turns(
            conversation_key=f"slack:{TEAM}:D1", limit=5
        )
        assert [t.text for t in turns if t.role == "assistant"] == [answer]


async def test_channel_thread_stream_names_the_recipient(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    answer = answer_of(700)
    claude.enqueue(answer, kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} explain", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.stopStream", timeout_s=10)
        await settle(running)
    start = slack.calls("chat.startStream")[0].params
    assert (start["recipient_user_id"], start["recipient_team_id"]) == ("U1", TEAM)
    assert start["thread_ts"] == mention["ts"]
    assert whole(replies(slack, "C0GENERAL", mention["ts"])) == answer


async def test_socket_mode_streams_natively(tmp_path: Path) -> None:
    async with running_fake_anthropic(chunk_size=16) as claude, running_fake_slack() as slack:
        answer = answer_of(900)
        claude.enqueue(answer, kind="chat")
        settings = slack_settings(slack, claude, tmp_path / "m.db", slack_signing_secret=None)
        async with running_bot(settings, http=False) as running:
            await slack.wait_for_socket()
            mention = slack.events.app_mention(f"{slack.identity.mention} go", user="U1")
            await slack.push_event(mention)
            await slack.wait_for_call("chat.stopStream", timeout_s=10)
            await settle(running)
        assert whole(replies(slack, "C0GENERAL", mention["ts"])) == answer
        assert slack.calls("chat.update") == []


@pytest.mark.parametrize("refusal", ["unknown_method", "channel_type_not_supported"])
async def test_refused_mid_answer_falls_back_to_edits_without_loss_or_repeat(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, refusal: str
) -> None:
    answer = answer_of(3000)
    claude.enqueue(Reply(text=answer, chunk_size=16, chunk_delay_s=0.005), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} long one", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.appendStream", count=2, timeout_s=10)
        slack.streaming_refusal = refusal
        await settle(running)
        posted = replies(slack, "C0GENERAL", mention["ts"])
        assert len(posted) == 2  # the streamed part, then the rest by post + edits
        assert posted[0].get("streaming") is True  # Slack refuses its chat.stopStream too
        assert whole(posted) == answer
        assert slack.calls("chat.postMessage")
        assert running.bot.conversations.streaming.available is (refusal != "unknown_method")


@pytest.mark.parametrize("fault", ["internal_error", "ratelimited"])
async def test_a_stream_cut_by_a_fallback_is_stopped_as_it_shows(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, fault: str
) -> None:
    # A refused append (or 429s past the retries) leaves the stream open unless the bot
    # stops it: Slack would show it unfinished until its own timeout (~5 minutes).
    answer = answer_of(3000)
    claude.enqueue(Reply(text=answer, chunk_size=16, chunk_delay_s=0.005), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} long one", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.appendStream", count=2, timeout_s=10)
        slack.fail_next("chat.appendStream", error=fault, retry_after=0, times=10)
        await settle(running)
        (cut,) = replies(slack, "C0GENERAL", mention["ts"])  # finished in place by edits
        assert cut.get("streaming") is False  # stopped, not left open
        assert cut["metadata"]["event_payload"] == {"answers_ts": mention["ts"]}
        assert shown_text(cut) == answer and has_feedback(cut)
        stops = slack.calls("chat.stopStream")
        assert [c.params["ts"] for c in stops] == [cut["ts"]]
        assert not stops[0].params.get("chunks")  # the unsent buffer goes by edits, once


@pytest.mark.parametrize(("length", "messages"), [(3000, 1), (5000, 2)])
async def test_a_stream_slack_ends_mid_answer_is_finished_in_place_never_a_broken_pill(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, length: int, messages: int
) -> None:
    """Slack ends a stream ~5 minutes after chat.startStream (python-slack-sdk #1859): the
    message is edited into the whole answer with its buttons; a second message follows only
    past the edit limit (3,500 characters)."""
    answer = answer_of(length)
    claude.enqueue(Reply(text=answer, chunk_size=16, chunk_delay_s=0.005), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} long one", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.appendStream", count=2, timeout_s=10)
        (streamed,) = slack.expire_streams()
        await settle(running)
    posted = replies(slack, "C0GENERAL", mention["ts"])
    assert posted[0]["ts"] == streamed and len(posted) == messages
    assert not any(m.get("broken_pill") or m.get("streaming") for m in posted)
    assert whole(posted) == answer
    assert [has_feedback(m) for m in posted] == [False] * (messages - 1) + [True]
    assert posted[0]["metadata"]["event_payload"] == {"answers_ts": mention["ts"]}
    refused = [c for c in slack.calls() if c.response.get("error")]
    assert {c.response["error"] for c in refused} == {"message_not_in_streaming_state"}


async def test_a_429_on_start_falls_back_to_edits_at_once(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    answer = answer_of(600)
    claude.enqueue(answer, kind="chat")
    slack.fail_next("chat.startStream", retry_after=30)  # waiting would stall the answer
    mention = slack.events.app_mention(f"{slack.identity.mention} quick", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_until(
            lambda: whole(replies(slack, "C0GENERAL", mention["ts"])) == answer,
            timeout_s=10,
            what="the answer by edits",
        )
        await settle(running)
    assert [c.status for c in slack.calls("chat.startStream")] == [429]
    assert slack.calls("chat.appendStream") == []
    assert whole(replies(slack, "C0GENERAL", mention["ts"])) == answer


async def test_setting_edits_never_streams(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    answer = answer_of(400)
    claude.enqueue(answer, kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} hi", user="U1")
    settings = slack_settings(slack, claude, tmp_path / "m.db", slack_streaming="edits")
    async with running_bot(settings) as running:
        await slack.send_event(running.events_url, mention)
        await settle(running)
    assert slack.calls("chat.startStream") == []
    assert whole(replies(slack, "C0GENERAL", mention["ts"])) == answer


async def test_a_long_streamed_answer_rolls_over_at_12000_chars(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    answer = answer_of(15_000)
    claude.enqueue(Reply(text=answer, chunk_size=200), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} essay", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.stopStream", count=2, timeout_s=20)
        await settle(running)
    posted = replies(slack, "C0GENERAL", mention["ts"])
    assert len(posted) == 2
    assert all(len(m["markdown_text"]) <= 12_000 for m in posted)
    assert whole(posted) == answer
    assert [has_feedback(m) for m in posted] == [False, True]
    assert all(c.ok for c in slack.calls("chat.appendStream"))


MENTIONS = "Hey <!channel> and <!here>, <!everyone>, <!subteam^S0TEAM> and <@U0OTHER>!"


@pytest.mark.parametrize("streaming", ["native", "edits"])
async def test_every_mention_form_in_an_answer_is_inert(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, streaming: str
) -> None:
    # chunk_size 3 splits the tokens across deltas (and across the helper's appends)
    answer = MENTIONS + " " + answer_of(600) + " <@U0LAST>"
    claude.enqueue(Reply(text=answer, chunk_size=3), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} say it", user="U1")
    settings = slack_settings(slack, claude, tmp_path / "m.db", slack_streaming=streaming)
    async with running_bot(settings) as running:
        await slack.send_event(running.events_url, mention)
        await settle(running)
    posted = replies(slack, "C0GENERAL", mention["ts"])
    assert whole(posted) == answer  # shown as written
    assert slack.pings("C0GENERAL") == []  # and nobody notified
    assert bool(slack.calls("chat.startStream")) is (streaming == "native")


def test_the_fake_renders_mentions_as_slack_documents() -> None:
    shown, pings = render_markdown_text("<!here> <@U1> &lt;!channel> a &amp; b")
    assert (shown, pings) == ("@here @U1 <!channel> a & b", ["!here", "@U1"])


def feedback_values(message: JsonDict) -> tuple[str, str]:
    (block,) = [b for b in message.get("blocks") or [] if b["type"] == "context_actions"]
    (element,) = block["elements"]
    assert element["type"] == "feedback_buttons"
    return element["positive_button"]["value"], element["negative_button"]["value"]


def has_feedback(message: JsonDict) -> bool:
    return any(b.get("type") == "context_actions" for b in message.get("blocks") or [])


ANSWER_PATHS = ["edits-setting", "429-on-start", "refused-mid-answer", "dm-top", "edits-roll-over"]


@pytest.mark.parametrize("path", ANSWER_PATHS)
async def test_every_finished_answer_carries_feedback_buttons_on_its_last_message_only(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, path: str
) -> None:
    """However the answer was shown (edits by setting, after a 429 on chat.startStream, a
    stream refused mid-answer, the top of a DM, edits rolled over at 3,500 characters),
    its last message carries the thumbs up / down; no other message of it does."""
    long = path in ("refused-mid-answer", "edits-roll-over")
    answer = answer_of(8000 if long else 500)
    claude.enqueue(Reply(text=answer, chunk_size=16, chunk_delay_s=0.002), kind="chat")
    overrides = {"slack_streaming": "edits"} if path in ("edits-setting", "edits-roll-over") else {}
    if path == "429-on-start":
        slack.fail_next("chat.startStream", retry_after=30)
    if path == "dm-top":
        asked = slack.events.message("hello there", user="U1")
        channel, root = "D1", None
    else:
        asked = slack.events.app_mention(f"{slack.identity.mention} tell me", user="U1")
        channel, root = "C0GENERAL", asked["ts"]
    settings = slack_settings(slack, claude, tmp_path / "m.db", **overrides)
    async with running_bot(settings) as running:
        await slack.send_event(running.events_url, asked)
        if path == "refused-mid-answer":
            await slack.wait_for_call("chat.appendStream", count=2, timeout_s=10)
            slack.streaming_refusal = "channel_type_not_supported"
        await settle(running)
    posted = bot_posts(slack, channel, root) if root else bot_posts(slack, channel)
    posted = [m for m in posted if m["ts"] != root]
    assert [has_feedback(m) for m in posted] == [False] * (len(posted) - 1) + [True]
    assert len(posted) >= (3 if path == "edits-roll-over" else 2 if long else 1)
    text = whole(posted)
    if path == "dm-top":  # the first DM starts with the privacy line
        text = text.split("\n\n", 1)[1]
    assert text == answer
    up, down = feedback_values(posted[-1])
    assert (up, down) == (f"up:U1:{asked['ts']}", f"down:U1:{asked['ts']}")
    final = posted[-1]["blocks"]
    assert final[0]["type"] == "markdown" and "markdown_text" not in posted[-1]
    assert bool(slack.calls("chat.startStream")) is (path in ("429-on-start", "refused-mid-answer"))


async def test_the_fake_refuses_blocks_slack_refuses(slack: FakeSlack) -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    from bots.slack_bot.blocks import feedback_blocks

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    buttons = feedback_blocks(asker="U1", answers_ts="1.2")
    ok = await client.chat_postMessage(
        channel="C1", text="hi", blocks=[{"type": "markdown", "text": "**hi**"}, *buttons]
    )
    assert ok["ok"]
    too_long = [{"type": "markdown", "text": "x" * 6001}, {"type": "markdown", "text": "y" * 6000}]
    long_label = [{**buttons[0]}]
    element = dict(long_label[0]["elements"][0])
    element["positive_button"] = {
        **element["positive_button"],
        "text": {"type": "plain_text", "text": "👍" * 76},
    }
    long_label[0]["elements"] = [element]
    for blocks, error in (
        (too_long, "msg_blocks_too_long"),
        ([{"type": "markdown", "text": ""}], "invalid_blocks"),
        (long_label, "invalid_blocks"),
        ([{"type": "context_actions", "elements": []}], "invalid_blocks"),
    ):
        with pytest.raises(SlackApiError) as refused:
            await client.chat_update(channel="C1", ts=ok["ts"], text="hi", blocks=blocks)
        assert refused.value.response["error"] == error
    with pytest.raises(SlackApiError) as conflict:
        await client.chat_update(
            channel="C1",
            ts=ok["ts"],
            markdown_text="hi",
            blocks=[{"type": "markdown", "text": "a"}],
        )
    assert conflict.value.response["error"] == "markdown_text_conflict"


async def test_feedback_clicks_are_stored_once_per_user_and_only_the_asker_rates(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    claude.enqueue(answer_of(300), kind="chat")
    mention = slack.events.app_mention(f"{slack.identity.mention} rate me", user="U1")
    async with running_bot(slack_settings(slack, claude, tmp_path / "m.db")) as running:
        await slack.send_event(running.events_url, mention)
        await slack.wait_for_call("chat.stopStream", timeout_s=10)
        await settle(running)
        (message,) = replies(slack, "C0GENERAL", mention["ts"])
        up, down = feedback_values(message)
        store = running.runtime.store
        since = datetime(2020, 1, 1, tzinfo=UTC)

        async def click_as(user: str, value: str) -> tuple[int, str]:
            payload = slack.events.block_actions(
                "selfmind_feedback", value, user=user, message_ts=message["ts"]
            )
            sent = await slack.send_interaction(running.events_url, payload)
            return sent.status, str(payload["response_url"])

        assert (await click_as("U1", up))[0] == 200
        # acknowledged only once stored: the row is there when the 200 arrives
        assert [(r.positive, r.negative) for r in await store.feedback_report(since=since)] == [
            (1, 0)
        ]
        assert (await click_as("U1", down))[0] == 200  # changes it, adds nothing
        rows = await store.feedback_report(since=since)
        assert [(r.workspace, r.positive, r.negative) for r in rows] == [(TEAM, 0, 1)]

        status, response_url = await click_as("U2", up)  # someone else's click
        assert status == 200
        reply = await slack.wait_for_response(response_url)
        assert reply["text"] == "Only the person who asked can rate this answer."
        assert await store.feedback_report(since=since) == rows

        forged = "up:U1"  # malformed value: acknowledged, nothing stored
        assert (await click_as("U1", forged))[0] == 200
        assert await store.feedback_report(since=since) == rows


@pytest.mark.parametrize("live", [True, False], ids=["live-stream", "expired-stream"])
async def test_a_crash_mid_stream_is_answered_again_in_the_cut_message(
    slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path, live: bool
) -> None:
    """A process killed mid-stream leaves the user's turn unanswered and a streamed message
    cut short (no metadata: Slack's chat.startStream takes none, chat.stopStream does), its
    ts recorded on the turn when chat.startStream returned it. The start-up recovery stops
    the stream if Slack has not ended it yet, edits it into the whole answer (with the
    feedback buttons) and stores it: one answer on screen."""
    db = tmp_path / "m.db"
    ask = slack.events.app_mention(f"{slack.identity.mention} what about the launch?", user="U1")
    slack.seed_message("C0GENERAL", ask["text"], user="U1", ts=ask["ts"])
    cut = slack.seed_message(
        "C0GENERAL",
        "The launch is",
        user="U0BOT",
        bot_id="B0BOT",
        thread_ts=ask["ts"],
        markdown_text="The launch is",
        streaming=live,
    )
    store = await SQLiteStore.open(str(db))
    try:
        assert await store.claim_event(keys=[f"msg:C0GENERAL:{ask['ts']}"])
        turn_id = await store.add_turn(
            turn=NewTurn(
                conversation_key=f"slack:{TEAM}:C0GENERAL:{ask['ts']}",
                user_key=f"slack:{TEAM}:U1",
                role="user",
                text="what about the launch?",
                origin="shared",
                sent_at=datetime.now(UTC),
                reflection="answering",
                platform_ref=ask["ts"],
            )
        )
        await store.set_reply_ref(turn_id=turn_id, reply_ref=cut["ts"])
    finally:
        await store.close()
    answer = "The launch is on Tuesday, as decided."
    claude.enqueue(answer, kind="chat")
    async with running_bot(slack_settings(slack, claude, db)) as running:
        await slack.wait_for_call("chat.stopStream", timeout_s=10)
        await settle(running)
        turns = await running.runtime.store.recent_turns(
            conversation_key=f"slack:{TEAM}:C0GENERAL:{ask['ts']}", limit=5
        )
    assert [(t.role, t.text) for t in turns][-1] == ("assistant", answer)
    (message,) = replies(slack, "C0GENERAL", ask["ts"])
    assert message["ts"] == cut["ts"] and shown_text(message) == answer
    assert message["metadata"]["event_payload"] == {"answers_ts": ask["ts"]}
    assert message.get("streaming") is False and has_feedback(message)
    (stop,) = slack.calls("chat.stopStream")
    assert stop.ok is live  # an expired stream: message_not_in_streaming_state, then edited


def test_inert_mentions_and_the_escaper_for_pieces() -> None:
    from bots.slack_bot.blocks import MentionEscaper, inert_mentions

    assert inert_mentions("<!here> <@U1> <#C1> a < b <https://x.y>") == (
        "&lt;!here> &lt;@U1> &lt;#C1> a < b <https://x.y>"
    )
    escaper = MentionEscaper()
    pieces = [escaper.piece(p) for p in ("hi <", "!channel> and <", "@U2> <")] + [escaper.flush()]
    joined = "".join(pieces)
    assert joined == "hi &lt;!channel> and &lt;@U2> <"
    assert render_markdown_text(joined)[1] == []


def ask_in(slack: FakeSlack, where: str) -> JsonDict:
    """U1's question ``where``: "dm" (top level), "dm thread" or "channel thread" (a
    mention, answered in its thread)."""
    if where == "dm thread":
        root = slack.seed_message("D1", "start a thread", user="U1")
        return slack.events.message("tell me more", user="U1", thread_ts=root["ts"])
    if where == "channel thread":
        return slack.events.app_mention(f"{slack.identity.mention} explain", user="U1")
    return slack.events.message("explain", user="U1")


@pytest.mark.parametrize(
    ("where", "streaming", "calls"),
    [
        ("dm thread", "native", 1),  # the stream is a reply: Slack clears the status
        ("channel thread", "edits", 1),  # so is the first post in the mention's thread
        ("dm", "edits", 2),  # a top-level answer is no reply in the status's thread
    ],
)
async def test_the_thinking_status_never_stays_and_a_reply_clears_it_without_a_call(
    where: str, streaming: str, calls: int, slack: FakeSlack, claude: FakeAnthropic, tmp_path: Path
) -> None:
    claude.enqueue(answer_of(300), kind="chat")
    event = ask_in(slack, where)
    settings = slack_settings(slack, claude, tmp_path / "m.db", slack_streaming=streaming)
    async with running_bot(settings) as running:
        await slack.send_event(running.events_url, event)
        await slack.wait_until(lambda: bool(slack.calls("chat.postMessage") or slack.calls(
            "chat.stopStream")), what="the answer")  # fmt: skip
        await settle(running)
    assert [bool(s["status"]) for s in slack.statuses] == [True, False][:calls]
    assert slack.statuses[0]["thread_ts"] == event.get("thread_ts", event["ts"])
    assert slack.shown_status == {}  # nothing left saying "is thinking…"


@pytest.mark.parametrize(
    ("where", "streaming", "refused"),
    [
        ("dm", "edits", "chat.postMessage"),  # a top-level answer cannot stream natively
        ("dm thread", "native", "chat.startStream"),
        ("channel thread", "native", "chat.startStream"),
    ],
)
async def test_the_thinking_status_is_cleared_when_the_answer_cannot_be_posted(
    where: str,
    streaming: str,
    refused: str,
    slack: FakeSlack,
    claude: FakeAnthropic,
    tmp_path: Path,
) -> None:
    """Slack refuses the answer (a platform error, no retry helps): the status must not keep
    saying "is thinking…" for the two minutes Slack takes to drop it by itself."""
    settings = slack_settings(slack, claude, tmp_path / "m.db", slack_streaming=streaming)
    async with running_bot(settings) as running:
        claude.enqueue(answer_of(300), kind="chat")  # the first DM: past the privacy line
        await slack.send_event(running.events_url, slack.events.message("hello", user="U1"))
        await slack.wait_until(lambda: bool(slack.calls("chat.postMessage")), what="first post")
        await settle(running)
        claude.enqueue(answer_of(300), kind="chat")
        for method in ("chat.postMessage", "chat.startStream"):
            slack.fail_next(method, error="is_archived", times=5)
        event = ask_in(slack, where)
        await slack.send_event(running.events_url, event)
        await slack.wait_until(
            lambda: any(not c.ok for c in slack.calls(refused)), what="the refused answer"
        )
        await settle(running)
    status_ts = event.get("thread_ts", event["ts"])
    shown = [(bool(s["status"]), s["thread_ts"]) for s in slack.statuses]
    assert shown[-2:] == [(True, status_ts), (False, status_ts)]
    assert slack.shown_status == {}
