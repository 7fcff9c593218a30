"""The fakes revoke a bot token as the platforms do, proved with the real clients: the old
token is refused (Slack: the chosen Web API error; Discord: REST 401, gateway 4004), the new
one works."""

from __future__ import annotations

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.discord_server import running_fake_discord
from tests.fakes.slack_server import running_fake_slack


@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked", "account_inactive"])
async def test_slack_refuses_the_revoked_token_and_takes_the_new_one(error: str) -> None:
    async with running_fake_slack() as slack:
        old = slack.bot_token
        new = slack.revoke_bot_token(error)
        assert new != old and slack.bot_token == new
        with pytest.raises(SlackApiError) as refused:
            await AsyncWebClient(token=old, base_url=slack.api_url).auth_test()
        assert refused.value.response["error"] == error
        assert (await AsyncWebClient(token=new, base_url=slack.api_url).auth_test())["ok"]
        # The app token is another token: still taken.
        opened = await AsyncWebClient(base_url=slack.api_url).apps_connections_open(
            app_token=slack.app_token
        )
        assert opened["ok"]
        events = (slack.events.tokens_revoked(), slack.events.app_uninstalled())
        assert events[0]["tokens"]["bot"] == [slack.identity.user_id]
        assert events[1] == {"type": "app_uninstalled"}


async def test_discord_answers_401_and_closes_the_gateway_with_4004() -> None:
    async with running_fake_discord() as fake, aiohttp.ClientSession() as http:
        old = fake.token
        url = f"{fake.api_base}/users/@me"
        async with http.get(url, headers={"Authorization": f"Bot {old}"}) as resp:
            assert resp.status == 200
        async with http.ws_connect(fake.gateway_url) as ws:
            await ws.receive_json()  # HELLO
            new = await fake.revoke_token(close_gateway=False)
            await ws.send_json({"op": 2, "d": {"token": old, "intents": 0}})
            closed = await ws.receive()
            assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == 4004
        async with http.ws_connect(fake.gateway_url) as ws:
            await ws.receive_json()
            await ws.send_json({"op": 6, "d": {"token": old, "session_id": "x", "seq": 0}})
            assert (await ws.receive()).data == 4004  # RESUME with it: the same
        async with http.get(url, headers={"Authorization": f"Bot {old}"}) as resp:
            assert resp.status == 401
        async with http.get(url, headers={"Authorization": f"Bot {new}"}) as resp:
            assert resp.status == 200
