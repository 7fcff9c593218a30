"""Team controls: who may use the bot (allow-lists) and how much (daily caps).

Allow-lists come from settings (empty = everyone): user keys, and each platform's
workspaces and channels, in the two settings its :class:`core.platforms.Platform` names
(``allow_lists``: Slack teams and channels, Discord guilds and channels; none for the
terminal). Adapters ask :meth:`Controls.allows` before answering;
outside the lists they stay silent in channels and answer DMs and slash commands with
:data:`NOT_ENABLED`.

Daily caps (0 = none) count chat messages and tokens per user and per workspace since the
start of the current UTC day, from the usage the API reported (``usage`` table). The turn
loop calls :meth:`Controls.check_limits` before any Claude call; at a cap it raises
``LimitReached`` saying when the cap resets. Memory commands never count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from core.errors import LimitReached
from core.platforms import platform_named
from core.settings import Settings
from core.store.seams import UsageStore
from core.types import utcnow

NOT_ENABLED = "SelfMind is not enabled here. Ask your workspace admin to allow it."


@dataclass(frozen=True)
class Place:
    """Where a message or command comes from."""

    platform: str  # a registered platform's name (core.platforms)
    user_key: str
    workspace: str | None = None  # Slack team id, Discord guild id
    channel: str | None = None  # None or the DM channel in private conversations
    private: bool = False


def day_start(now: datetime) -> datetime:
    """Midnight UTC of ``now``'s day."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


class Controls:
    """Allow-lists and daily caps from settings, counted from the usage store."""

    def __init__(self, settings: Settings, usage: UsageStore) -> None:
        self.settings = settings
        self.usage = usage

    def allows(self, place: Place) -> bool:
        """True when the allow-lists admit this place (and user)."""
        s = self.settings
        if s.allowed_users and place.user_key not in s.allowed_users:
            return False
        platform = platform_named(place.platform)
        if platform is None or platform.allow_lists is None:
            return True
        workspaces, channels = (getattr(s, name) for name in platform.allow_lists)
        if workspaces and place.workspace is not None and place.workspace not in workspaces:
            return False
        if workspaces and place.workspace is None and not place.private:
            return False
        return not (channels and not place.private and place.channel not in channels)

    async def check_limits(
        self, *, user_key: str, workspace: str | None, now: datetime | None = None
    ) -> None:
        """Raise ``LimitReached`` when a daily cap is reached; else return."""
        s = self.settings
        if not (
            s.user_daily_messages
            or s.user_daily_tokens
            or s.workspace_daily_messages
            or s.workspace_daily_tokens
        ):
            return
        now = now or utcnow()
        since = day_start(now)
        reset = (since + timedelta(days=1)).strftime("%H:%M UTC")
        hours = max(1, round((since + timedelta(days=1) - now).total_seconds() / 3600))
        when = f"It resets at {reset} (in about {hours} h)."
        scopes: list[tuple[str, str | None, str | None, int, int]] = [
            ("your", user_key, None, s.user_daily_messages, s.user_daily_tokens)
        ]
        if workspace is not None:
            scopes.append(
                (
                    "this workspace's",
                    None,
                    workspace,
                    s.workspace_daily_messages,
                    s.workspace_daily_tokens,
                )
            )
        for whose, user, space, max_messages, max_tokens in scopes:
            if max_messages:
                sent = await self.usage.chat_messages_since(
                    since=since, user_key=user, workspace=space
                )
                if sent >= max_messages:
                    raise LimitReached(
                        f"You've reached {whose} daily limit of {max_messages} messages. {when}"
                    )
            if max_tokens:
                rows = await self.usage.usage_report(
                    since=since, by="kind", user_key=user, workspace=space
                )
                used = sum(r.total_tokens for r in rows)
                if used >= max_tokens:
                    raise LimitReached(
                        f"You've reached {whose} daily limit of {max_tokens:,} tokens. {when}"
                    )
