"""RuntimeSpec: launch argv, environment, absolute directories, validation, no secrets in reprs.

No process is started here (see test_runtime_actor.py for what reaches the child).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.runtime import DEFAULT_MODEL, DEFAULT_PROVIDER, RuntimeSpec, bundled_dsh_command

SECRET_KEY = "sk-live-0123456789abcdef"
SECRET_TOKEN = "tok-fedcba9876543210"


def spec(tmp_path: Path, **kwargs: Any) -> RuntimeSpec:
    kwargs.setdefault("dsh_home", tmp_path / "home")
    kwargs.setdefault("cwd", tmp_path)
    return RuntimeSpec(**kwargs)


def test_bundled_dsh_is_found_through_the_runtime_package(tmp_path: Path) -> None:
    """With no command, argv is the runtime package's dsh plus ``--profile sdk``."""
    bundled = bundled_dsh_command()
    assert Path(bundled[0]).is_file() and "deepseek_harness_runtime" in bundled[0]
    assert spec(tmp_path).argv() == [*bundled, "--profile", "sdk"]
    assert spec(tmp_path).display_name == "dsh"


def test_patches_are_absolute_and_follow_the_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = spec(tmp_path, profile="custom", patches=["a.toml", "/etc/b.toml"]).argv()
    assert argv[-6:] == ["--profile", "custom", "--patch", str(tmp_path / "a.toml"), "--patch", "/etc/b.toml"]


def test_an_explicit_argv_is_used_as_given(tmp_path: Path) -> None:
    """Any command works; the profile is appended only when asked for."""
    assert spec(tmp_path, command=["my-runtime", "--flag"]).argv() == ["my-runtime", "--flag"]
    assert spec(tmp_path, command=("my-runtime",), append_profile=True, patches=["/p.toml"]).argv() == [
        "my-runtime", "--profile", "sdk", "--patch", "/p.toml"]
    with pytest.raises(TypeError, match="split it first"):
        spec(tmp_path, command="my-runtime --flag")
    with pytest.raises(ValueError, match="must not be empty"):
        spec(tmp_path, command=[])


def test_defaults(tmp_path: Path) -> None:
    made = spec(tmp_path)
    assert made.profile == "sdk"
    assert made.handshake_timeout == 30.0
    assert made.handshake_attempts == 1
    assert (made.shutdown_timeout, made.eof_grace, made.terminate_grace) == (1.0, 2.0, 2.0)
    assert (made.provider, made.model) == (DEFAULT_PROVIDER, DEFAULT_MODEL)
    params = made.initialize_params()
    assert (params.reasoning_effort, params.max_tokens, params.approval_requests, params.capabilities) == (
        None, None, None, None)


def test_dsh_home_is_required_and_never_defaults_to_the_user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No dsh_home is an error at once, even when DSH_HOME is set in the environment."""
    monkeypatch.setenv("DSH_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"explicit dsh_home.*never falls back to ~/\.dsh"):
        RuntimeSpec(cwd=tmp_path)
    with pytest.raises(ValueError, match=r"explicit dsh_home"):
        RuntimeSpec(command=["x"], cwd=tmp_path, env={"DSH_HOME": str(tmp_path)})
    with pytest.raises(ValueError, match="dsh_home must be a directory path"):
        RuntimeSpec(dsh_home="  ", cwd=tmp_path)


def test_directories_are_made_absolute_at_construction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative cwd, process_cwd and dsh_home resolve against the cwd when the spec is made."""
    monkeypatch.chdir(tmp_path)
    made = RuntimeSpec(dsh_home="home", cwd="ws/sub/..", process_cwd="proc")
    monkeypatch.chdir("/")
    assert made.cwd == tmp_path / "ws"
    assert made.process_cwd == tmp_path / "proc"
    assert made.dsh_home == tmp_path / "home"
    assert made.initialize_params().cwd == str(tmp_path / "ws")
    assert made.process_env()["DSH_HOME"] == str(tmp_path / "home")
    assert RuntimeSpec(dsh_home="/h").cwd.is_absolute()  # the default cwd is the current one


def test_environment_overrides_and_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """env overrides the inherited environment; base_url and api_key override both."""
    monkeypatch.setenv("INHERITED_VAR", "yes")
    monkeypatch.setenv("DEEPSEEK_BASE_URL", "http://inherited.invalid")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "inherited-key-000000")
    made = spec(tmp_path, env={"DEEPSEEK_BASE_URL": "http://env.invalid", "EXTRA": "1", "DSH_HOME": "/ignored"},
                base_url="http://127.0.0.1:9", api_key=SECRET_KEY)
    env = made.process_env()
    assert env["INHERITED_VAR"] == "yes" and env["EXTRA"] == "1"
    assert env["DEEPSEEK_BASE_URL"] == "http://127.0.0.1:9"
    assert env["DEEPSEEK_API_KEY"] == SECRET_KEY
    assert env["DSH_HOME"] == str(tmp_path / "home")
    isolated = spec(tmp_path, env={"EXTRA": "1"}, inherit_env=False).process_env()
    assert "INHERITED_VAR" not in isolated and isolated["EXTRA"] == "1"
    assert "DEEPSEEK_API_KEY" not in isolated
    with pytest.raises(TypeError, match="env must map strings to strings"):
        spec(tmp_path, env={"N": 1})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("provider", "", "provider must be a non-empty string"),
        ("provider", 5, "provider must be a non-empty string"),
        ("model", "  ", "model must be a non-empty string"),
        ("model", None, "model must be a non-empty string"),
        ("reasoning_effort", "", "reasoning_effort must be a non-empty string"),
        ("reasoning_effort", 3, "reasoning_effort must be a non-empty string"),
        ("max_tokens", 0, "max_tokens must be a positive integer"),
        ("max_tokens", -5, "max_tokens must be a positive integer"),
        ("max_tokens", 1.5, "max_tokens must be a positive integer"),
        ("max_tokens", True, "max_tokens must be a positive integer"),
        ("max_tokens", "100", "max_tokens must be a positive integer"),
        ("handshake_timeout", 0, "handshake_timeout must be a positive number"),
        ("shutdown_timeout", -1, "shutdown_timeout must be a positive number"),
        ("terminate_grace", "2", "terminate_grace must be a positive number"),
        ("handshake_attempts", 0, "handshake_attempts must be an integer >= 1"),
        ("profile", "", "profile must be a non-empty string"),
        ("base_url", "", "base_url must be a non-empty string"),
    ],
)
def test_invalid_values_are_rejected(tmp_path: Path, field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        spec(tmp_path, **{field: value})
    assert repr(value) in str(caught.value)


def test_route_fields_reach_initialize(tmp_path: Path) -> None:
    made = spec(tmp_path, provider="deepseek-official", model="m1", reasoning_effort="max", max_tokens=1000)
    params = made.initialize_params(approval_requests=True, user_questions=True)
    assert (params.provider, params.model, params.reasoning_effort, params.max_tokens) == (
        "deepseek-official", "m1", "max", 1000)
    assert params.approval_requests is True and params.capabilities is not None


def test_secrets_never_appear_in_the_repr(tmp_path: Path) -> None:
    made = spec(tmp_path, api_key=SECRET_KEY, env={"MY_SERVICE_TOKEN": SECRET_TOKEN, "PLAIN": "visible"},
                command=["runtime", f"--key={SECRET_KEY}"])
    for text in (repr(made), str(made), made.display_name, repr(made.evolve(model="other"))):
        assert SECRET_KEY not in text and SECRET_TOKEN not in text
    assert "visible" in repr(made) and "***" in repr(made)
    assert set(made.secrets()) >= {SECRET_KEY, SECRET_TOKEN}


def test_inherited_secret_values_are_redacted_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child inherits our environment, so a long inherited key counts as a secret."""
    monkeypatch.setenv("DEEPSEEK_API_KEY", "inherited-secret-value")
    monkeypatch.setenv("SOME_AUTH_FLAG", "1")  # too short to redact without blanking every "1"
    secrets = spec(tmp_path).secrets()
    assert "inherited-secret-value" in secrets and "1" not in secrets
    assert "inherited-secret-value" not in spec(tmp_path, inherit_env=False).secrets()


def test_evolve_validates_again(tmp_path: Path) -> None:
    made = spec(tmp_path)
    assert made.evolve(model="x").model == "x"
    with pytest.raises(ValueError):
        made.evolve(max_tokens=0)
    assert os.path.isabs(made.evolve(cwd="rel").cwd)


def test_placeholder_keys_do_not_mangle_messages(tmp_path: Path) -> None:
    """A one-letter dummy key is no credential; redacting it would garble every error."""
    assert spec(tmp_path, api_key="k", inherit_env=False).secrets() == []
    assert spec(tmp_path, api_key="abcd", inherit_env=False).secrets() == ["abcd"]
