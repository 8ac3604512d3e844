"""The node gateways' pure parts, without Ray: what a hosting actor receives (never the key),
the spec it runs (routed, key variables empty). (A cache with independent epochs on Ray:
tests/scale/test_ray_cache.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.scale._gateways import GatewayRoute, host_secrets, route_spec
from dsh_orchestra.scale._portable import API_KEY

KEY = "sk-node-gateway-test-key-0123456789"


def test_the_hosts_get_no_key() -> None:
    secrets = {API_KEY: KEY, "DEEPSEEK_API_KEY": KEY, "MY_KEY": KEY, "COPY": f"Bearer {KEY}", "OTHER_TOKEN": "t"}
    assert host_secrets(secrets, KEY, {"DEEPSEEK_API_KEY", "MY_KEY"}, API_KEY) == {"OTHER_TOKEN": "t"}


def test_a_routed_spec_has_the_token_and_empty_key_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    spec = RuntimeSpec(dsh_home=tmp_path, env={"MY_KEY": KEY, "DEEPSEEK_BASE_URL": "http://127.0.0.1:1", "KEEP": "x"})
    route = GatewayRoute(base_url="http://127.0.0.1:5555", token="dsho-gw-token", api_key_env="MY_KEY", node_id="n")
    routed = route_spec(spec, route)
    assert routed.base_url == route.base_url and routed.api_key == "dsho-gw-token"
    assert routed.env["DEEPSEEK_API_KEY"] == "" and routed.env["MY_KEY"] == "" and routed.env["KEEP"] == "x"
    assert "DEEPSEEK_BASE_URL" not in routed.env
    assert "dsho-gw-token" not in repr(route)
