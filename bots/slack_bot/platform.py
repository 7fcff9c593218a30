"""What the core knows of Slack (:class:`core.platforms.Platform`, registered as the entry
point ``slack`` in ``pyproject.toml``) and how answers stream in Slack.

Keys the Slack adapter makes (:mod:`bots.slack_bot.places`): users ``slack:{team}:{user}``
(the team that counts: the enterprise on Enterprise Grid), conversations
``slack:{install}:{channel}:{thread_ts}`` in a channel or group DM and
``slack:{install}:{dm_channel}`` in a DM, channels ``slack:{team}:{channel}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.platforms import Platform
from core.settings import Settings
from core.streaming.chunking import slack_markdown
from core.streaming.reply import EditBudgets, StreamConfig
from core.types import Place, PlaceKind

#: Stays clear of ``msg_too_long``, which ``chat.update`` returns well below the documented
#: 40,000 characters (https://api.slack.com/methods/chat.update).
SLACK_MAX_REPLY_CHARS = 3500
#: ``chat.update`` is rate tier 3, about 50 calls a minute per workspace
#: (https://api.slack.com/methods/chat.update, https://api.slack.com/apis/rate-limits).
SLACK_UPDATES_PER_MINUTE = 50
#: Slack clears an ``assistant.threads.setStatus`` status after two minutes without a
#: message (https://docs.slack.dev/reference/methods/assistant.threads.setStatus): shown
#: again this often while the model thinks, well inside the limit.
SLACK_STATUS_REFRESH_S = 90.0


def _user_workspace(parts: Sequence[str]) -> str | None:
    return parts[1] if len(parts) == 3 else None


def _conversation_place(parts: Sequence[str]) -> Place | None:
    # A channel thread or a group DM; the stored key cannot tell public from private.
    if len(parts) != 4:
        return None
    kind: PlaceKind = "group_dm" if parts[2].startswith("G") else "private_channel"
    return Place(platform="slack", kind=kind, workspace=parts[1], channel=parts[2])


def _message_link(parts: Sequence[str], ref: str) -> str | None:
    # Slack's "Copy link" form, redirected to the workspace.
    channel_id = parts[2] if len(parts) == 4 else ""
    if channel_id.isascii() and channel_id.isalnum() and ref.replace(".", "").isdigit():
        return f"https://slack.com/archives/{parts[2]}/p{ref.replace('.', '')}"
    return None


SLACK = Platform(
    name="slack",
    title="Slack",
    user_workspace=_user_workspace,
    conversation_place=_conversation_place,
    message_link=_message_link,
    mention="<@{id}>",
    allow_lists=("allowed_slack_teams", "allowed_slack_channels"),
    channels=True,
)


def stream_config(
    *, max_chars: int = SLACK_MAX_REPLY_CHARS, edit_interval_s: float = 1.0
) -> StreamConfig:
    """How answers stream in Slack: texts go out as ``markdown_text``, with tables in code
    blocks (:func:`core.streaming.chunking.slack_markdown`); the status is refreshed every
    :data:`SLACK_STATUS_REFRESH_S` while the model thinks."""
    return StreamConfig(
        max_chars=max_chars,
        edit_interval_s=edit_interval_s,
        render=slack_markdown,
        status_refresh_s=SLACK_STATUS_REFRESH_S,
    )


def edit_budgets(*, updates_per_minute: int = SLACK_UPDATES_PER_MINUTE) -> EditBudgets:
    """Budgets for ``chat.update``, one per workspace (scope ``"slack:{team_id}"``)."""
    return EditBudgets(calls_per_minute=updates_per_minute)


def settings_stream_config(settings: Settings) -> StreamConfig:
    """:func:`stream_config` with the limits ``settings`` set."""
    return stream_config(
        max_chars=settings.slack_max_reply_chars, edit_interval_s=settings.slack_edit_interval_s
    )
