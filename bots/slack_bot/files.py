"""Slack's files in the core's terms: the ``files`` of a message event as
:class:`core.files.FileRef`\\ s (the reading rule itself is :mod:`core.files`'s).

A file object (docs.slack.dev, "File object"; the ``file_share`` message subtype) carries
``id``, ``name``, ``mimetype``, ``filetype``, ``size``, ``url_private`` and
``url_private_download``; its bytes are at ``url_private`` for a request with
``Authorization: Bearer <bot token>`` (scope ``files:read``), and Slack's file host
redirects it within itself. The token may go only to Slack's file host,
``https://files.slack.com``, or to the host of ``SLACK_API_URL`` when that is set (a
Slack-compatible server, the tests' fake): never elsewhere, redirects included.

A file Slack does not hand over gets its sentence without a download: no ``url_private``,
``file_access: check_file_info`` (a file of another organisation in a Slack Connect
channel), ``mode: hidden_by_limit`` (over a free workspace's limit) or ``tombstone``
(deleted).
"""

from __future__ import annotations

from typing import Any

from core.files import FileRef
from core.files.fetch import origin
from core.settings import DEFAULT_SLACK_API_URL

SLACK_FILE_HOST = "https://files.slack.com"
MAX_FILES = 100
"""At most this many file objects of one event are looked at (Slack sends up to 10)."""


def file_origins(api_url: str) -> frozenset[str]:
    """Where the bot token may be sent for a download (see the module docstring)."""
    origins = {origin(SLACK_FILE_HOST)}
    if api_url.rstrip("/") != DEFAULT_SLACK_API_URL.rstrip("/"):
        origins.add(origin(api_url))
    return frozenset(origins)


def file_refs(files: object, *, token: str, origins: frozenset[str]) -> tuple[FileRef, ...]:
    """The :class:`FileRef` of each Slack file object in ``files`` (anything else in the
    list, or a list that is not one, is ignored)."""
    if not isinstance(files, list):
        return ()
    return tuple(
        _ref(f, token=token, origins=origins) for f in files[:MAX_FILES] if isinstance(f, dict)
    )


def _ref(file: dict[str, Any], *, token: str, origins: frozenset[str]) -> FileRef:
    name = next(
        (str(file[k]) for k in ("name", "title", "id") if isinstance(file.get(k), str) and file[k]),
        "file",
    )
    size = file.get("size")
    mimetype = file.get("mimetype")
    url = file.get("url_private")
    unavailable = None
    if file.get("mode") == "tombstone":
        unavailable = "it was deleted"
    elif (
        file.get("file_access") == "check_file_info"
        or file.get("mode") == "hidden_by_limit"
        or not isinstance(url, str)
        or not url
    ):
        unavailable = "Slack did not share it with me"
    return FileRef(
        name,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        media_type=mimetype if isinstance(mimetype, str) else None,
        url=url if isinstance(url, str) and unavailable is None else None,
        bearer=token,
        allowed_origins=origins,
        unavailable=unavailable,
    )
