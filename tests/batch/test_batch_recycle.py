"""A long batch recycles its runtimes (issue 12 item 13): after ``max_sessions_per_runtime``
sessions or past ``max_runtime_rss_mib``, with no item cut, failed or retried because of it;
the options are checked (library errors name the parameter, the CLI the flag: exit 2)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from batch_support import by_id, cli_args, items, sim_process, write_dataset
from process_table import assert_gone

from dsh_orchestra.batch import BatchOptions, BatchUsageError, PoolExecutor, run_batch
from dsh_orchestra.batch._local import PoolRunner
from dsh_orchestra.cli import main
from dsh_orchestra.cli._errors import message
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import Runtime


class PidRecorder:
    """The default executor, noting the runtime process each attempt was placed on."""

    def __init__(self) -> None:
        self.pids: list[int] = []

    @asynccontextmanager
    async def open(self, spec: RuntimeSpec | None, options: BatchOptions) -> AsyncIterator[PoolRunner]:
        async with PoolExecutor().open(spec, options) as runner:
            lease = runner.pool.lease

            @asynccontextmanager
            async def noting(runtime: Runtime | None = None, *, alone: bool = False) -> AsyncIterator[Runtime]:
                async with lease(runtime, alone=alone) as placed:
                    assert placed.actor.pid is not None
                    self.pids.append(placed.actor.pid)
                    yield placed

            runner.pool.lease = noting  # type: ignore[method-assign]
            yield runner


@pytest.mark.parametrize("limits", [{"max_sessions_per_runtime": 7}, {"max_runtime_rss_mib": 1}],
                         ids=["sessions", "rss"])
async def test_a_batch_recycles_without_cutting_or_retrying_an_item(tmp_path: Path, limits: dict[str, Any]) -> None:
    """30 items, one runtime, 4 in flight: every item ok exactly once in one attempt, no retry;
    a new process every 7 items (or after every item past a 1 MiB limit); all of them reaped."""
    dataset = write_dataset(tmp_path / "ds.jsonl", items(30))
    out = tmp_path / "r.jsonl"
    recorder = PidRecorder()
    with trio.fail_after(120):
        summary = await run_batch(dataset, out, sim_process(tmp_path),
                                  BatchOptions(runtimes=1, concurrency=4, progress="none", **limits),
                                  executor=recorder)
    lines = out.read_text().splitlines()
    results = by_id(out)
    assert len(lines) == 30 and len(results) == 30
    assert {r["status"] for r in results.values()} == {"ok"}
    assert {r["attempts"] for r in results.values()} == {1}
    assert (summary.ok, summary.error, summary.retries) == (30, 0, 0)
    used = list(dict.fromkeys(recorder.pids))
    if "max_sessions_per_runtime" in limits:
        assert [recorder.pids.count(pid) for pid in used] == [7, 7, 7, 7, 2]
    else:  # each runtime is over the limit when its first item ends: at most 4 items each
        assert len(used) >= 30 // 4 and max(recorder.pids.count(pid) for pid in used) <= 4
    for pid in used:
        assert_gone(pid)


def test_batch_options_default_and_checks() -> None:
    assert (BatchOptions().max_sessions_per_runtime, BatchOptions().max_runtime_rss_mib) == (500, None)
    assert BatchOptions(max_sessions_per_runtime=None).max_sessions_per_runtime is None
    for name, value, expected in [
        ("max_sessions_per_runtime", 0, "an integer >= 1"), ("max_sessions_per_runtime", 1.5, "an integer >= 1"),
        ("max_runtime_rss_mib", 0, "a positive number of MiB (finite)"),
        ("max_runtime_rss_mib", math.nan, "a positive number of MiB (finite)"),
        ("max_runtime_rss_mib", math.inf, "a positive number of MiB (finite)"),
        ("max_runtime_rss_mib", True, "a positive number of MiB (finite)"),
    ]:
        with pytest.raises(BatchUsageError) as caught:
            BatchOptions(**{name: value})
        assert caught.value.param == name and repr(caught.value.value) == repr(value)
        assert str(caught.value) == f"{name} must be {expected}, not {value!r}"


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [("--max-sessions-per-runtime", "0", "--max-sessions-per-runtime must be an integer >= 1, not 0"),
     ("--max-sessions-per-runtime", "-2", "--max-sessions-per-runtime must be an integer >= 1, not -2"),
     ("--max-sessions-per-runtime", "2.5", "argument --max-sessions-per-runtime: invalid int value: '2.5'"),
     ("--max-runtime-rss", "0", "--max-runtime-rss must be a positive number of MiB (finite), not 0.0"),
     ("--max-runtime-rss", "nan", "--max-runtime-rss must be a positive number of MiB (finite), not nan"),
     ("--max-runtime-rss", "inf", "--max-runtime-rss must be a positive number of MiB (finite), not inf"),
     ("--max-runtime-rss", "-5", "--max-runtime-rss must be a positive number of MiB (finite), not -5.0"),
     ("--max-runtime-rss", "lots", "argument --max-runtime-rss: invalid float value: 'lots'")],
)
def test_bad_recycling_flags_exit_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                                     value: str, said: str) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", items(2))
    out = tmp_path / "r.jsonl"
    try:
        status = main(cli_args(dataset, out, tmp_path, flag, value, "--no-progress"))
    except SystemExit as exc:  # argparse
        status = exc.code  # type: ignore[assignment]
    assert status == 2
    assert said in capsys.readouterr().err
    assert not out.exists()


def test_recycling_flags_run_the_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", items(9))
    out = tmp_path / "r.jsonl"
    status = main(cli_args(dataset, out, tmp_path, "--max-sessions-per-runtime", "2", "--max-runtime-rss", "4096",
                           "--no-progress"))
    assert status == 0, capsys.readouterr().err
    results = by_id(out)
    assert len(results) == 9 and {(r["status"], r["attempts"]) for r in results.values()} == {("ok", 1)}


def test_the_flags_map_to_the_parameters() -> None:
    with pytest.raises(BatchUsageError) as caught:
        BatchOptions(max_runtime_rss_mib=-1)
    assert message(caught.value) == "--max-runtime-rss must be a positive number of MiB (finite), not -1"
