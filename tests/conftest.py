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

Parallel runs. The suite runs on several pytest-xdist workers at once (``-n 3 --dist
loadgroup`` in pyproject.toml's addopts; ``-n 0`` runs it in one process). Every test must
therefore be fine beside any other: it keeps its files in ``tmp_path`` (never a shared glob of
/tmp), looks only at its own processes (``process_table.our_children``, or its ``tmp_path`` in
an argv; never a machine-wide count), and has no wall-clock bound tighter than 5x the expected
time. What cannot share goes into a group: ``@pytest.mark.xdist_group("NAME")`` (a whole
module: ``pytestmark = pytest.mark.xdist_group("NAME")``) runs every test of the group on one
worker, one after another, while other workers run other tests. The groups:

* ``"ray"``: every test that starts or joins a Ray instance (tests/scale/test_ray_*.py). One
  Ray instance at a time on the machine, and a module's ``ray_cluster`` is started once.
* ``"sim_run"``, ``"eval_runs"``: added here, below, to every test that uses the report tests'
  session-scoped fixture of that name, so each real run is made once, not once per worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

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


# Hypothesis's two wall-clock checks, off for every property test: a 200 ms deadline per example
# and the "input generation is slow" health check (which failed
# tests/batch/test_batch_shard.py::test_shards_partition_any_ids beside a loaded machine's other
# work: "only generated 5 valid inputs after 1.63 seconds"). What the properties check is unchanged.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

SHARED_RUNS = ("sim_run", "eval_runs", "view_run")
"""Session-scoped fixtures that make a real run: their tests share one xdist worker (a group each)."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in SHARED_RUNS:
            if name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(name))
        if "browser" in getattr(item, "fixturenames", ()):  # every test given a browser is a browser test
            item.add_marker(pytest.mark.browser)
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
            handshake_timeout=120.0,  # dsh starts took 37-60+ s under disk contention (measured)
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
