"""The fake Slack's file host: ``url_private`` downloads as Slack serves them, and the file
objects of ``file_share`` events (docs.slack.dev, "File object" and the ``file_share``
message subtype).

``url_private`` (``/files-pri/{team}-{id}/{name}``) answers ``302`` to
``url_private_download`` (``/files-pri/{team}-{id}/download/{name}``) on the same host, as
Slack's file host redirects; that one serves the bytes only to ``Authorization: Bearer
<bot token>`` (403 otherwise). A hosted file can misbehave on purpose (``behaviour``):

- ``forbidden``: 403 even with the token; ``missing``: 404 (deleted meanwhile);
- ``elsewhere``: ``url_private`` redirects to another host (``127.0.0.2``);
- ``other_team``: another workspace's file: Slack answers the bot's token with its sign-in
  page (200, ``text/html``);
- ``hidden``: a file the bot cannot see: the event's object has no URLs and
  ``file_access: check_file_info``.

``downloads`` records ``(path, Authorization header)`` of every request.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

Behaviour = Literal["ok", "forbidden", "missing", "elsewhere", "other_team", "hidden"]
JsonDict = dict[str, Any]


@dataclass
class HostedFile:
    id: str
    team: str
    name: str
    mimetype: str
    content: bytes
    behaviour: Behaviour = "ok"
    declared_size: int | None = None


class SlackFileHost:
    """Files hosted by one fake Slack (``base_url``, ``bot_token``)."""

    def __init__(self, *, team: str, bot_token: str) -> None:
        self.team, self.bot_token = team, bot_token
        self.base_url = ""
        self.files: dict[str, HostedFile] = {}
        self.downloads: list[tuple[str, str]] = []
        self._ids = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/files-pri/{key}/download/{name}", self._download),
            web.get("/files-pri/{key}/{name}", self._private),
        ]

    def add(
        self,
        name: str,
        content: bytes,
        *,
        mimetype: str = "application/octet-stream",
        behaviour: Behaviour = "ok",
        declared_size: int | None = None,
        team: str | None = None,
    ) -> JsonDict:
        """Host ``content``; returns the file object an event carries."""
        file_id = f"F{next(self._ids):08d}"
        hosted = HostedFile(
            file_id, team or self.team, name, mimetype, content, behaviour, declared_size
        )
        self.files[file_id] = hosted
        key = f"{hosted.team}-{file_id}"
        filetype = name.rsplit(".", 1)[-1].lower() if "." in name else "binary"
        obj: JsonDict = {
            "id": file_id,
            "created": 1764000000,
            "timestamp": 1764000000,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype,
            "pretty_type": filetype.upper(),
            "user": "U0USER",
            "user_team": hosted.team,
            "editable": False,
            "size": len(content) if declared_size is None else declared_size,
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": False,
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": f"{self.base_url}/files-pri/{key}/{name}",
            "url_private_download": f"{self.base_url}/files-pri/{key}/download/{name}",
            "permalink": f"https://selfmind-test.slack.com/files/U0USER/{file_id}/{name}",
            "file_access": "visible",
        }
        if behaviour == "hidden":
            for url in ("url_private", "url_private_download", "permalink"):
                del obj[url]
            obj["file_access"] = "check_file_info"
        return obj

    def _hosted(self, request: web.Request) -> HostedFile:
        self.downloads.append((request.path, request.headers.get("Authorization", "")))
        _, _, file_id = request.match_info["key"].partition("-")
        hosted = self.files.get(file_id)
        if hosted is None or hosted.behaviour == "missing":
            raise web.HTTPNotFound()
        return hosted

    async def _private(self, request: web.Request) -> web.Response:
        hosted = self._hosted(request)
        where = f"/files-pri/{request.match_info['key']}/download/{request.match_info['name']}"
        if hosted.behaviour == "elsewhere":
            host = request.url.with_host("127.0.0.2")
            raise web.HTTPFound(str(host.with_path(where)))
        raise web.HTTPFound(where)

    async def _download(self, request: web.Request) -> web.Response:
        hosted = self._hosted(request)
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            raise web.HTTPForbidden()
        if hosted.behaviour == "forbidden":
            raise web.HTTPForbidden()
        if hosted.behaviour == "other_team" or hosted.team != self.team:
            return web.Response(
                text="<html><body>Sign in to Slack</body></html>", content_type="text/html"
            )
        return web.Response(body=hosted.content, content_type=hosted.mimetype)


def file_share(events: Any, text: str, files: list[JsonDict], **kw: Any) -> JsonDict:
    """A ``message`` event of subtype ``file_share`` (``events``: a
    :class:`tests.fakes.slack_server.SlackEvents`; ``kw`` as its ``message``)."""
    event: JsonDict = events.message(text, **kw)
    event.pop("client_msg_id", None)
    return event | {
        "subtype": "file_share",
        "files": files,
        "upload": False,
        "display_as_bot": False,
    }
