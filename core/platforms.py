"""What the core knows of a chat platform: the :class:`Platform` description its adapter
registers (docs/architecture.md, "What an adapter provides").

The core holds no platform's name in its logic. Each adapter describes its platform once,
as a :class:`Platform` (``bots/slack_bot/platform.py``, ``bots/discord_bot/platform.py``,
``bots/terminal/platform.py``), and registers it as an entry point of the group
:data:`ENTRY_POINT_GROUP` in ``pyproject.toml``::

    [project.entry-points."selfmind.platforms"]
    slack = "bots.slack_bot.platform:SLACK"

The core finds the descriptions through :func:`registered` (read once, on first use, so
importing this module does nothing and the core never imports ``bots/``, as with SQLAlchemy's
dialects). The pure rules that read keys (:mod:`core.rules.places`, :mod:`core.rules.links`,
the prompt's speaker labels, the metrics' platform label, the allow-lists of
:mod:`core.chat.controls`) ask :func:`platform_of_key` for the description of a key's first
word; a word no adapter registered gets the neutral answers (a DM outside any workspace, no
link, no mention, no allow-list, the metrics label ``other``).

Keys: every user, conversation and channel key an adapter makes starts with its platform's
:attr:`Platform.name` and a colon, and its other parts are split on ``:``. A bare name
(``selfmind memories list --user alice``, the evaluation's users) means the :data:`LOCAL`
platform, the terminal's.

Errors: :func:`registered` raises ``RuntimeError`` when no entry point of the group is
installed at all (the package's metadata is older than this module: reinstall it) or when two
entry points give one name; an entry point whose object is not a :class:`Platform`, or whose
name is not its key, raises ``TypeError``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points

from core.types import Place

ENTRY_POINT_GROUP = "selfmind.platforms"
"""The entry-point group each adapter registers its :class:`Platform` in."""

LOCAL = "cli"
"""The platform word of a key made from a bare name: the terminal's (``cli:alice``), the
command line's ``--user alice`` and the evaluation's users."""

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _no_workspace(parts: Sequence[str]) -> str | None:
    return None


def _no_place(parts: Sequence[str]) -> Place | None:
    return None


def _no_link(parts: Sequence[str], ref: str) -> str | None:
    return None


def _no_linked(link: str) -> list[str] | None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    """One chat platform as its adapter describes it to the core.

    ``name``: the first word of every key the adapter makes (``slack`` in ``slack:T1:U1``),
    lower-case ``[a-z][a-z0-9_]*``, at most 32 characters; also the metrics label.
    ``title``: the platform's name for people ("Slack").
    ``user_workspace``: the workspace a user key names, from its parts split on ``:``
    (``["slack", "T1", "U1"]`` -> ``"T1"``); None when the key names none. Where a memory
    whose place is unknown counts as learned: that workspace's DM with the bot.
    ``conversation_place``: the shared place a conversation key names, from its parts
    (``slack:T1:C1:1700.1`` -> a private channel C1 of T1), for turns stored before places
    were recorded; None for a DM or a key it does not know (the caller then keeps the owner's
    DM). Never wider than what the key proves: private unless the key says otherwise.
    ``message_link``: a link to one message from its conversation key's parts and the
    platform's message id (``ref``), or None where the platform gives none.
    ``linked_conversation``: the parts of the conversation key a link names, where the
    link tells (the inverse of ``message_link``, the message id left out); None for a link
    it cannot read back (what a channel entry's link tells of where it was said,
    :mod:`core.store.thread_repair`).
    ``mention``: how a message names a person by their platform id, with ``{id}`` for it
    (``"<@{id}>"``); None when the platform has no mentions (the prompt then shows the user
    key as data).
    ``allow_lists``: the names of the two :class:`core.settings.Settings` fields that hold the
    workspaces and the channels allowed to use the bot (empty = all); None when the platform
    has no allow-list (the terminal: whoever runs it owns it).
    ``channels``: the platform has channels that may keep their own memory
    (``selfmind channels`` takes their keys).
    Raises ``ValueError`` for a malformed ``name``, a blank ``title``, or a ``mention``
    without ``{id}``.
    """

    name: str
    title: str
    user_workspace: Callable[[Sequence[str]], str | None] = _no_workspace
    conversation_place: Callable[[Sequence[str]], Place | None] = _no_place
    message_link: Callable[[Sequence[str], str], str | None] = _no_link
    linked_conversation: Callable[[str], list[str] | None] = _no_linked
    mention: str | None = None
    allow_lists: tuple[str, str] | None = None
    channels: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"platform name must match {_NAME.pattern}, not {self.name!r}")
        if not self.title.strip():
            raise ValueError(f"platform {self.name!r} needs a title")
        if self.mention is not None and "{id}" not in self.mention:
            raise ValueError(f"mention format of {self.name!r} must hold {{id}}")


@functools.cache
def registered() -> Mapping[str, Platform]:
    """Every installed :class:`Platform` by name (entry points of :data:`ENTRY_POINT_GROUP`,
    loaded on the first call). Raises as the module docstring says."""
    found: dict[str, Platform] = {}
    points = entry_points(group=ENTRY_POINT_GROUP)
    if not points:
        raise RuntimeError(
            f"no chat platform is registered (entry points {ENTRY_POINT_GROUP!r}): "
            "reinstall the package (pip install -e .)"
        )
    for point in points:
        described = point.load()
        if not isinstance(described, Platform):
            raise TypeError(f"entry point {point.value} is not a Platform")
        if described.name != point.name:
            raise TypeError(f"entry point {point.name!r} describes {described.name!r}")
        if described.name in found:
            raise RuntimeError(f"two entry points register the platform {described.name!r}")
        found[described.name] = described
    return dict(sorted(found.items()))


def platform_named(name: str) -> Platform | None:
    """The registered platform called ``name``; None for a word no adapter registered."""
    return registered().get(name)


def platform_of_key(key: str) -> tuple[Platform | None, list[str]]:
    """The registered platform of a user, conversation or channel key (its first word) and
    the key's parts split on ``:`` (``"slack:T1:U1"`` -> ``(SLACK, ["slack", "T1", "U1"])``);
    None for a key whose first word no adapter registered."""
    parts = key.split(":")
    return platform_named(parts[0]), parts


__all__ = [
    "ENTRY_POINT_GROUP",
    "LOCAL",
    "Platform",
    "platform_named",
    "platform_of_key",
    "registered",
]
