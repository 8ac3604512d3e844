"""What the gateway remembers per session is forgotten once it is taken: a long run keeps no
counts, epochs or subagent links of the items it finished, and none for judges."""

from __future__ import annotations

import json

import httpx
import trio

from dsh_orchestra.gateway import JUDGE_SESSION_PREFIX, GatewayOptions
from dsh_orchestra.testing._fake_model import FakeModelServer

from gateway_support import body, running_gateway


async def test_take_forgets_the_item_and_its_subagents_and_judges_are_not_kept(fake_model: FakeModelServer) -> None:
    judge = f"{JUDGE_SESSION_PREFIX}0123456789abcdef01234567"
    calls = [("item-1", body("ECHO item")),
             ("sub-1", body('ECHO child. Your parent agent id is "item-1"')),
             ("sub-2", body('ECHO grandchild. Your parent agent id is "sub-1"')),
             (judge, body("ECHO grade it"))]
    with trio.fail_after(60):
        async with running_gateway(fake_model.base_url, GatewayOptions()) as gw, \
                httpx.AsyncClient(trust_env=False) as client:
            gw.tag("item-1", epoch=2)
            for session, payload in calls:
                headers = {"x-api-key": gw.token, "x-deepseek-harness-session-id": session}
                response = await client.post(gw.base_url + "/v1/messages", content=json.dumps(payload), headers=headers)
                assert response.status_code == 200 and "message_stop" in response.text
                await gw.settled(session)
            assert gw.roots == {"sub-1": "item-1", "sub-2": "item-1"}
            assert gw.epochs == {"item-1": 2, "sub-1": 2, "sub-2": 2}  # the subagents' calls keyed by the item's epoch
            assert set(gw.sessions) == {"item-1"}  # the judge's calls are kept by no session
            stats = gw.take("item-1")
            assert (stats.calls, stats.upstream) == (3, 3)
            assert (gw.sessions, gw.epochs, gw.roots, gw.children) == ({}, {}, {}, {})
            assert (gw.totals.calls, gw.totals.upstream) == (4, 4)  # the judge's call counts in the run's totals
