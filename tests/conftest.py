"""Shared pytest fixtures for every test directory.

Fixtures (all function-scoped):

* ``dsh_home``: a fresh, empty directory to use as the runtime's ``DSH_HOME`` (never ``~/.dsh``).
* ``workspace``: a fresh, empty directory to use as the session working directory.
* ``model_script``: the :class:`~dsh_orchestra.testing._script.Script` the ``fake_model``
  serves; ``DEFAULT_SCRIPT`` unless a module or test overrides this fixture.
* ``fake_model``: a running scripted model server on ``127.0.0.1`` (``.base_url``,
  ``.requests``), closed after the test (async fixture: trio tests only).
* ``dsh_spec``: a factory ``dsh_spec(**overrides) -> RuntimeSpec`` for the **real bundled**
  runtime wired to ``fake_model``: fresh ``dsh_home``, ``cwd=workspace``, telemetry disabled,
  ``DEEPSEEK_BASE_URL`` at the fake model, a dummy api key. Keyword overrides go to
  ``RuntimeSpec`` (``env`` overrides are merged into the defaults).

An autouse check fails any test that leaves a child process of the test process behind
(running or zombie), after killing what it left so later tests start clean.

Tests marked ``integration`` are skipped when the bundled runtime is not installed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh_orchestra.runtime import RuntimeSpec, bundled_dsh_command
from dsh_orchestra.testing._fake_model import FakeModelServer, open_fake_model
from dsh_orchestra.testing._script import DEFAULT_SCRIPT, Script
from process_table import fail_on_leaks, our_children

TEST_API_KEY = "test-key-not-a-secret"
"""The dummy credential ``dsh_spec`` gives the runtime (the fake model ignores it)."""

BASE_ENV = {"DSH_TELEMETRY_MODE": "DISABLED", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
"""Environment every runtime launched by ``dsh_spec`` gets on top of the test process's."""

LEAK_GRACE = 1.0
"""Seconds a child may take to disappear after a test before it counts as leaked."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        bundled_dsh_command()
    except FileNotFoundError as exc:
        skip = pytest.mark.skip(reason=f"bundled runtime not installed: {exc}")
        for item in items:
            if "integration" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def dsh_home(tmp_path: Path) -> Path:
    """A fresh, empty DSH_HOME directory for this test."""
    path = tmp_path / "dsh-home"
    path.mkdir()
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh, empty workspace directory for this test."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def model_script() -> Script:
    """The script ``fake_model`` serves; override this fixture to serve another one."""
    return DEFAULT_SCRIPT


@pytest.fixture
async def fake_model(model_script: Script) -> AsyncIterator[FakeModelServer]:
    """The scripted model server, listening on 127.0.0.1 for the duration of the test."""
    async with open_fake_model(model_script) as server:
        yield server


@pytest.fixture
async def dsh_spec(fake_model: FakeModelServer, dsh_home: Path, workspace: Path) -> Callable[..., RuntimeSpec]:
    """A factory of RuntimeSpecs for the real bundled runtime against ``fake_model``."""

    def make(**overrides: Any) -> RuntimeSpec:
        env = {**BASE_ENV, **overrides.pop("env", {})}
        values: dict[str, Any] = dict(
            dsh_home=dsh_home, cwd=workspace, base_url=fake_model.base_url, api_key=TEST_API_KEY,
            handshake_timeout=30.0,
        )
        values.update(overrides)
        return RuntimeSpec(env=env, **values)

    return make


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail the test when it leaves a child process (running or zombie) behind."""
    before = {p.pid for p in our_children()}
    yield
    fail_on_leaks(lambda: [p for p in our_children() if p.pid not in before], LEAK_GRACE, "child processes")
