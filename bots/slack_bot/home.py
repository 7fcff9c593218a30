"""The App Home tab: each person's own memory, published with ``views.publish``.

What the Home tab shows (one view per user, :func:`home_view`): the memory mode with
*Pause learning* / *Resume learning* and *Turn memory off* / *Turn memory on*; how many
memories, by kind; *Export* (a JSON Lines file to the DM) and *Forget everything* (behind
Slack's confirmation dialog); a search box; the newest :data:`PAGE_SIZE` memories (or the
search's matches) with a *Forget* button each and *Newer* / *Older* paging. A *Forget*
button carries :func:`core.memory.refs.memory_ref` (the id and its creation time): a click
on a page made stale meanwhile forgets nothing and says so in the page's notice.

Only its owner sees or changes it: ``views.publish`` shows a view to one ``user_id``; every
click acts for the user who clicked (the key of :func:`bots.slack_bot.commands.user_key`,
whatever a button's value says), and a click whose view belongs to someone else (the
``owner`` in ``private_metadata``) is refused. *Forget everything* carries a single-use token
from the store (:meth:`MemoryService.confirm_forget_all`, surface ``home``), replaced at each
publish: a replay of the same signed click, or a click on a page published over since (another
replica's included), erases nothing and gets a fresh page.

Outside the allow-lists (:mod:`core.chat.controls`, the one rule messages and commands
follow; the Home tab is the person's own, private surface) the tab shows only
:data:`~core.chat.controls.NOT_ENABLED`: no memory, no count, no button, and a click (a
forged one: there is no button) changes nothing. Daily caps do not apply (nothing here spends
tokens); with memory off the page still shows what is kept, so it can be forgotten.

It is published when the person opens the Home tab, after each reflection that learned
something about them and after each of their slash commands and clicks. Limits
(docs.slack.dev, "Home tab views"): at most :data:`MAX_VIEW_BLOCKS` blocks,
``private_metadata`` at most :data:`MAX_METADATA_CHARS` characters.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

from aiohttp import ClientError
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.slack_bot.blocks import JsonDict, button, clip_mrkdwn, context, escape_mrkdwn, section
from bots.slack_bot.commands import Spawn, slack_place, user_key
from bots.slack_bot.places import home_place
from core.chat.controls import NOT_ENABLED, Controls
from core.errors import MemoryNotFound, PlanNotPending, StaleButton, StoreError
from core.memory import replies
from core.memory.profile import listed_text
from core.memory.refs import memory_ref
from core.memory.replies import MODE_REPLIES
from core.memory.service import MemoryService
from core.memory.tidy_notes import TidyNote
from core.rules.places import usable_reaches
from core.types import Memory, MemoryMode, MemoryStats

logger = logging.getLogger(__name__)

PAGE_SIZE = 10
MAX_VIEW_BLOCKS = 100
"""Slack's limit on the blocks of a Home tab view (docs.slack.dev, "Home tab views")."""
MAX_METADATA_CHARS = 3000
"""Slack's limit on a view's ``private_metadata``."""
MAX_QUERY_CHARS = 200
"""A search longer than this is cut (the search box is one line)."""
MAX_SEARCH_RESULTS = 100
"""``MemoryService.search`` returns at most this many; search pages end there."""
MAX_OFFSET = 1_000_000
"""The deepest page offset a view may carry: far more memories than one person keeps, and
within every store's integer range (a larger one, e.g. >= 2**63 in a forged
``private_metadata``, is refused rather than reaching SQL)."""

FORGET = "selfmind_home_forget"
PAGE = "selfmind_home_page"
SEARCH = "selfmind_home_search"
MODE = "selfmind_home_mode"
EXPORT = "selfmind_home_export"
FORGET_ALL = "selfmind_home_forget_all"
UNDO_TIDY = "selfmind_home_undo_tidy"
ACTIONS = (FORGET, PAGE, SEARCH, MODE, EXPORT, FORGET_ALL, UNDO_TIDY)

SendExport = Callable[[str, str], Awaitable[int]]
"""``(user_key, user_id) -> count``: the JSON Lines export to the user's DM."""


@dataclass(frozen=True)
class HomeState:
    """What one published Home view shows, kept in its ``private_metadata``."""

    owner: str
    offset: int = 0
    query: str = ""

    def metadata(self) -> str:
        return json.dumps({"owner": self.owner, "offset": self.offset, "query": self.query})

    @classmethod
    def parse(cls, text: str) -> HomeState | None:
        """The state of a view's ``private_metadata``; None when malformed."""
        try:
            data = json.loads(text)
            owner, offset, query = data["owner"], data["offset"], data["query"]
        except (ValueError, KeyError, TypeError):
            return None
        if not (isinstance(owner, str) and isinstance(offset, int) and isinstance(query, str)):
            return None
        if isinstance(offset, bool) or offset > MAX_OFFSET:
            return None
        return cls(owner=owner, offset=max(0, offset), query=query[:MAX_QUERY_CHARS])


def _plural(count: int, word: str) -> str:
    """``1 memory``, ``2 memories``, ``3 facts``."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word[:-1]}ies" if word.endswith("y") else f"{count} {word}s"


def _mode_buttons(mode: MemoryMode) -> list[JsonDict]:
    learn = (
        button("Resume learning", MODE, "on")
        if mode == "paused"
        else button("Pause learning", MODE, "paused")
    )
    power = (
        button("Turn memory on", MODE, "on")
        if mode == "off"
        else button("Turn memory off", MODE, "off")
    )
    return [power] if mode == "off" else [learn, power]


def _forget_all_button(total: int, token: str) -> JsonDict:
    element = button("Forget everything", FORGET_ALL, token, "danger")
    element["confirm"] = {
        "title": {"type": "plain_text", "text": "Forget everything?"},
        "text": {
            "type": "plain_text",
            "text": f"All {_plural(total, 'memory')} and our conversation history go. "
            "This cannot be undone.",
        },
        "confirm": {"type": "plain_text", "text": "Forget everything"},
        "deny": {"type": "plain_text", "text": "Keep"},
        "style": "danger",
    }
    return element


def home_view(
    *,
    state: HomeState,
    mode: MemoryMode,
    stats: MemoryStats,
    memories: Sequence[Memory],
    more: bool,
    forget_all_token: str = "",
    notice: str | None = None,
    tidy: TidyNote | None = None,
) -> JsonDict:
    """The Home tab view (``{"type": "home", "blocks": [...], ...}``) of ``state.owner``:
    ``memories`` is the page shown (newest first, or a search's best first) and ``more``
    whether an *Older* page follows; ``forget_all_token`` the single-use token behind its
    *Forget everything* button (:meth:`MemoryService.confirm_forget_all`, shown when
    ``stats.total``); ``tidy``: last night's consolidation change, said with an *Undo*
    button. At most :data:`MAX_VIEW_BLOCKS` blocks."""
    kinds = ", ".join(_plural(n, kind) for kind, n in sorted(stats.by_kind.items()) if n)
    summary = f"*{_plural(stats.total, 'memory')}*" + (f": {kinds}" if kinds else "")
    blocks: list[JsonDict] = [
        {"type": "header", "text": {"type": "plain_text", "text": "What I remember about you"}},
        section(escape_mrkdwn(MODE_REPLIES[mode])),
        {"type": "actions", "elements": _mode_buttons(mode)},
        section(summary),
    ]
    if stats.total:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    button("Export", EXPORT, "jsonl"),
                    _forget_all_button(stats.total, forget_all_token),
                ],
            }
        )
    if tidy is not None and tidy.tidied:
        block = section(escape_mrkdwn(replies.tidied(tidy.tidied, command=False, dated=tidy.dated)))
        block["accessory"] = button("Undo", UNDO_TIDY, tidy.change_id)
        blocks.append(block)
    if notice:
        blocks.append(context(escape_mrkdwn(notice)))
    blocks += [
        {"type": "divider"},
        {
            "type": "input",
            "block_id": "home_search",
            "dispatch_action": True,
            "optional": True,
            "label": {"type": "plain_text", "text": "Search your memories"},
            "element": {
                "type": "plain_text_input",
                "action_id": SEARCH,
                "max_length": MAX_QUERY_CHARS,
                "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
            },
        },
    ]
    first, last = state.offset + 1, state.offset + len(memories)
    if state.query:
        title = f"*Matching “{escape_mrkdwn(state.query)}”*, best first"
    else:
        title = "*Newest first*"
    if memories:
        blocks.append(section(clip_mrkdwn(f"{title} ({first}–{last})")))
    else:
        empty = "Nothing matches." if state.query else "I don't remember anything about you yet."
        blocks.append(section(empty if not state.offset else "No more memories on this page."))
    for memory in memories[:PAGE_SIZE]:
        block = section(clip_mrkdwn(f"`#{memory.id}` {escape_mrkdwn(listed_text(memory))}"))
        block["accessory"] = button("Forget", FORGET, memory_ref(memory))
        blocks.append(block)
    paging = []
    if state.offset > 0:
        paging.append(button("◀ Newer", PAGE, str(max(0, state.offset - PAGE_SIZE))))
    if more:
        paging.append(button("Older ▶", PAGE, str(state.offset + PAGE_SIZE)))
    if state.query:
        paging.append(button("Clear search", PAGE, "clear"))
    if paging:
        blocks.append({"type": "actions", "elements": paging})
    blocks.append(context("Only you can see this page."))
    assert len(blocks) <= MAX_VIEW_BLOCKS  # 10 + PAGE_SIZE + 3 at most
    return {
        "type": "home",
        "callback_id": "selfmind_home",
        "private_metadata": state.metadata()[:MAX_METADATA_CHARS],
        "blocks": blocks,
    }


def not_enabled_view() -> JsonDict:
    """The Home tab of someone outside the allow-lists: :data:`NOT_ENABLED`, nothing else."""
    return {
        "type": "home",
        "callback_id": "selfmind_home",
        "blocks": [section(escape_mrkdwn(NOT_ENABLED))],
    }


class SlackHome:
    """Publishes each person's Home tab and handles its clicks (see the module docstring).
    ``team_id``: the workspace a refresh after a reflection is checked against (events and
    clicks carry their own)."""

    def __init__(
        self,
        *,
        service: MemoryService,
        client: AsyncWebClient,
        install_id: str,
        spawn: Spawn,
        send_export: SendExport,
        controls: Controls | None = None,
        team_id: str = "",
    ) -> None:
        self.service = service
        self.client = client
        self.install_id = install_id
        self.spawn = spawn
        self.send_export = send_export
        self.controls = controls
        self.team_id = team_id or install_id

    def register(self, app: AsyncApp) -> None:
        """Add the Home tab's button listeners to ``app``."""
        for action in ACTIONS:
            app.action(action)(self.on_action)

    def key(self, user: str) -> str:
        return user_key(self.install_id, user)

    def allowed(self, user: str, team: str = "") -> bool:
        """The allow-lists' verdict on ``user``'s Home tab, from ``team`` (default: the
        installation's workspace)."""
        place = slack_place(key=self.key(user), team=team or self.team_id, channel=None)
        return self.controls is None or self.controls.allows(place)

    async def publish(
        self,
        user: str,
        state: HomeState | None = None,
        notice: str | None = None,
        *,
        team: str = "",
    ) -> None:
        """Publish ``user``'s Home tab (page and search of ``state``; outside the
        allow-lists :func:`not_enabled_view`); a Slack error is logged, never raised (the
        tab is refreshed again at the next change)."""
        state = state or HomeState(owner=user)
        key = self.key(user)
        if not self.allowed(user, team):
            await self._publish(user, not_enabled_view(), key=key, memories=0)
            return
        mode = await self.service.get_mode(user_key=key)
        stats = await self.service.stats(user_key=key)
        if state.query:
            k = min(MAX_SEARCH_RESULTS, state.offset + PAGE_SIZE + 1)
            found = await self.service.search(user_key=key, query=state.query, k=k)
            rows = [s.memory for s in found[state.offset :]]
        else:
            # The tab is the person's own (their DM's place): the rule lets it list every
            # memory of theirs.
            reach = usable_reaches(home_place(team=team or self.team_id, enterprise=None))
            rows = await self.service.list_memories(
                user_key=key, limit=PAGE_SIZE + 1, offset=state.offset, reach=reach
            )
        # Single-use and replaced at each publish: a replayed click, or one on a page that
        # was published over, forgets nothing.
        token = (
            await self.service.confirm_forget_all(user_key=key, surface="home")
            if stats.total
            else ""
        )
        view = home_view(
            state=state,
            mode=mode,
            stats=stats,
            memories=rows[:PAGE_SIZE],
            more=len(rows) > PAGE_SIZE,
            forget_all_token=token,
            notice=notice,
            tidy=await self.service.last_tidy(user_key=key),
        )
        await self._publish(user, view, key=key, memories=stats.total)

    async def _publish(self, user: str, view: JsonDict, *, key: str, memories: int) -> None:
        try:
            await self.client.views_publish(user_id=user, view=view)
        except (SlackApiError, ClientError) as exc:
            logger.warning("home tab of %s not published: %s", key, type(exc).__name__)
            return
        logger.info("home tab published user=%s memories=%d", key, memories)

    async def refresh(self, key: str) -> None:
        """Publish the Home tab of the user of ``key`` (first page), if it is a key of this
        installation."""
        platform, _, rest = key.partition(":")
        install, _, user = rest.partition(":")
        if platform != "slack" or install != self.install_id or not user:
            return
        try:
            await self.publish(user)
        except Exception:  # the store failed: the page is refreshed at the next change
            logger.exception("home tab of %s not refreshed", key)

    async def on_action(self, ack: AsyncAck, body: JsonDict) -> None:
        await ack()
        self.spawn(self._guarded(body), "slack-home-action")

    async def _guarded(self, body: JsonDict) -> None:
        try:
            await self.run_action(body)
        except Exception:
            logger.exception("home tab action failed")

    async def run_action(self, body: JsonDict) -> None:
        """Handle one click on a Home view, always for the user who clicked."""
        user = str(cast(JsonDict, body.get("user") or {}).get("id") or "")
        view = cast(JsonDict, body.get("view") or {})
        state = HomeState.parse(str(view.get("private_metadata") or ""))
        actions = cast(list[JsonDict], body.get("actions") or [])
        if not user or not actions:
            return
        key = self.key(user)
        who = cast(JsonDict, body.get("user") or {})
        team = str(who.get("team_id") or cast(JsonDict, body.get("team") or {}).get("id") or "")
        if not self.allowed(user, team):
            logger.warning("home action refused: user=%s is outside the allow-lists", key)
            await self.publish(user, team=team)
            return
        if state is None or state.owner != user:
            # Someone else's view (a forged or misrouted click): change nothing.
            logger.warning("home action refused: user=%s is not the view's owner", key)
            return
        action = actions[0]
        action_id, value = str(action.get("action_id")), str(action.get("value") or "")
        logger.info("home action %s user=%s", action_id, key)
        notice: str | None = None
        if action_id == FORGET:
            try:
                forgotten = await self.service.forget_ref(user_key=key, ref=value)
                notice = replies.forgot(forgotten.id)
            except StaleButton as exc:
                notice = str(exc)
            except MemoryNotFound:
                notice = "That memory was already gone."
        elif action_id == PAGE:
            if value == "clear":
                state = HomeState(owner=user)
            elif value.isascii() and value.isdigit() and len(value) <= len(str(MAX_OFFSET)):
                offset = min(int(value), MAX_OFFSET)
                state = HomeState(owner=user, offset=offset, query=state.query)
        elif action_id == SEARCH:
            query = " ".join(value.split())[:MAX_QUERY_CHARS]
            state = HomeState(owner=user, query=query)
        elif action_id == MODE and value in MODE_REPLIES:
            await self.service.set_mode(user_key=key, mode=value)
        elif action_id == EXPORT:
            count = await self.send_export(key, user)
            notice = (
                f"Sent {_plural(count, 'memory')} to our DM." if count else "Nothing to export."
            )
        elif action_id == UNDO_TIDY:
            try:
                restored = await self.service.undo_tidy(user_key=key, change_id=value)
                notice = replies.tidy_undone(restored)
            except StoreError as exc:
                notice = replies.sentence(str(exc))
        elif action_id == FORGET_ALL:
            try:
                count = await self.service.forget_all_confirmed(
                    user_key=key, token=value, surface="home"
                )
                notice = replies.forgot_all(count)
            except PlanNotPending:
                logger.warning("home forget-all refused user=%s: token gone", key)
                notice = replies.HOME_CONFIRM_GONE
        await self.publish(user, state, notice, team=team)
