"""What a runtime behind the gateway gets in its environment: no variable that holds the real
key, and nothing else emptied because a placeholder key happens to be a common string."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_orchestra.gateway._route import routed_to
from dsh_orchestra.runtime import RuntimeSpec

KEY = "sk-real-key-for-route-tests-0123456789"


def test_every_variable_that_holds_the_real_key_is_emptied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    monkeypatch.setenv("INHERITED_HEADER", f"Bearer {KEY}")
    spec = RuntimeSpec(dsh_home=tmp_path, env={"OWN": f"x{KEY}x", "MY_KEY": "other", "PLAIN": "kept"})
    env = routed_to(spec, base_url="http://127.0.0.1:1", token="tok", api_key_env="MY_KEY", api_key=KEY).env
    assert env["DEEPSEEK_API_KEY"] == env["INHERITED_HEADER"] == env["OWN"] == env["MY_KEY"] == ""
    assert env["PLAIN"] == "kept"


@pytest.mark.parametrize("placeholder", ["k", "x", "usr"])
def test_a_placeholder_key_empties_only_the_key_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          placeholder: str) -> None:
    """A local model's dummy key ("k") is no secret: PATH holding its letters is kept
    (before, PATH was emptied and the sandbox could not find bwrap)."""
    monkeypatch.setenv("DEEPSEEK_API_KEY", placeholder)
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/opt/x/k")
    spec = RuntimeSpec(dsh_home=tmp_path, env={"NOTE": f"{placeholder} is here"})
    env = routed_to(spec, base_url="http://127.0.0.1:1", token="tok", api_key=placeholder).env
    assert env["DEEPSEEK_API_KEY"] == ""
    assert "PATH" not in env and env["NOTE"] == f"{placeholder} is here"


def test_a_short_key_of_four_characters_is_still_a_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("INHERITED", "token=sk-1;")
    spec = RuntimeSpec(dsh_home=tmp_path, env={"PLAIN": "kept"})
    env = routed_to(spec, base_url="http://127.0.0.1:1", token="tok", api_key="sk-1").env
    assert env["INHERITED"] == "" and env["PLAIN"] == "kept"
