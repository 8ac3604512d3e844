"""Fixtures of the scale-out tests.

* ``one_ray_at_a_time`` (module scope, autouse): a module marked ``xdist_group("ray")`` holds
  the run's Ray lock (tests/ray_serial.py) while it runs: one Ray cluster at a time under xdist.
* ``ray_cluster`` (module scope): one small local Ray instance (2 CPUs, no dashboard) for the
  module, started with ``LocalRay`` and joined by this process with ``ray.init``; the tests
  using it are skipped, saying why, only when ``ray`` is not importable. After the module:
  ``ray.shutdown()``, the instance stopped, and a check that none of its processes is left.
* ``no_leaked_processes`` (autouse, overrides the suite-wide one): the same check, except that
  Ray's own processes (its workers come and go as actors start and end) are not ours; the
  runtimes the actors start are, also those re-parented away from this process when their
  actor was killed (found by the test's directory in their argv).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dsh_orchestra.scale._local import LocalRay

from scale_support import RayCluster, our_runtimes, wait_gone
from process_table import fail_on_leaks, our_children
from ray_serial import ray_serial

RAY_PROCESS = re.compile(r"ray::|/ray/|raylet|gcs_server")
LEAK_GRACE = 5.0
"""Seconds for leftovers to go: a killed actor's runtimes exit when they see end of input."""


def _is_ray(process: psutil.Process) -> bool:
    try:
        return bool(RAY_PROCESS.search(process.name()) or RAY_PROCESS.search(" ".join(process.cmdline())))
    except psutil.Error:
        return True  # gone (or a zombie without a command line): nothing to leak


@pytest.fixture(autouse=True)
def no_leaked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test when it leaves a process of its own behind (Ray's processes excepted)."""
    before = {p.pid for p in our_children()}
    yield
    tmp_path = request.node.funcargs.get("tmp_path")

    def leaked() -> list[psutil.Process]:
        found = [p for p in our_children() if p.pid not in before and not _is_ray(p)]
        if isinstance(tmp_path, Path):
            found += [p for p in our_runtimes(tmp_path) if p.pid not in {q.pid for q in found}]
        return found

    fail_on_leaks(leaked, LEAK_GRACE, "processes")


@pytest.fixture(scope="module", autouse=True)
def one_ray_at_a_time(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A module marked ``xdist_group("ray")`` holds the run's Ray lock while it runs (ray_serial.py)."""
    if request.node.get_closest_marker("xdist_group") is None:
        yield
        return
    with ray_serial(tmp_path_factory):
        yield


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    """A local Ray instance for the module, this process connected to it as a driver (holding
    the run's Ray lock, marked or not)."""
    pytest.importorskip("ray", reason="ray is not installed (the 'ray' extra: pip install '.[test,ray]')")
    with ray_serial(tmp_path_factory):
        yield from _ray_cluster()


def _ray_cluster() -> Iterator[RayCluster]:
    import ray

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"  # loopback only; a token file other users rewrite must not matter
    local = LocalRay(num_cpus=2)
    address = local.start()
    assert local.process is not None
    head = psutil.Process(local.process.pid)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        yield RayCluster(address=address, temp_dir=Path(local.temp_dir))
    finally:
        ray.shutdown()
        members = [head, *head.children(recursive=True)]
        local.stop()
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
        wait_gone(members, 15, "Ray processes outlived the instance")
