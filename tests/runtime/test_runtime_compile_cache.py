"""RuntimeSpec.compile_cache: a dsh keeps V8's compile cache in its DSH_HOME (NODE_COMPILE_CACHE).

Who gets the variable and where it points (unit), and on the real bundled runtime under the
sandbox: the first start on a new home writes no cache (``auto``: it would pay for writing it at
its exit), the next start on that home writes it, the one after has its compiled code accepted
from it; ``off`` writes none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import trio

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.runtime._spec import compile_cache_dir
from dsh_orchestra.session import open_runtime

VARIABLE = "NODE_COMPILE_CACHE"


def test_a_dsh_gets_a_cache_in_a_home_used_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/inherited/elsewhere")  # the sandbox would not let it write there
    home = tmp_path / "home"
    expected = str(home / ".cache" / "node-compile-cache")
    assert compile_cache_dir(home) == Path(expected)
    home.mkdir()
    fresh = RuntimeSpec(dsh_home=home)
    assert not fresh.uses_compile_cache and fresh.process_env()[VARIABLE] == "/inherited/elsewhere"
    (home / "profiles").mkdir()  # what a dsh makes at its first start
    assert RuntimeSpec(dsh_home=home).process_env()[VARIABLE] == expected  # the bundled dsh
    patched = RuntimeSpec(command=("/opt/dsh",), append_profile=True, dsh_home=home)
    assert patched.process_env()[VARIABLE] == expected
    assert RuntimeSpec(dsh_home=home, inherit_env=False).process_env()[VARIABLE] == expected
    other = tmp_path / "other"
    compile_cache_dir(other).mkdir(parents=True)  # a cache already there counts as used too
    assert RuntimeSpec(dsh_home=other).process_env()[VARIABLE] == str(compile_cache_dir(other))
    assert RuntimeSpec(dsh_home=tmp_path / "new", compile_cache="on").process_env()[VARIABLE] == str(
        compile_cache_dir(tmp_path / "new"))


def test_the_spec_env_wins_and_it_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/inherited")
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    assert RuntimeSpec(dsh_home=home, env={VARIABLE: "/mine"}).process_env()[VARIABLE] == "/mine"
    assert RuntimeSpec(dsh_home=home, compile_cache="off").process_env()[VARIABLE] == "/inherited"
    assert VARIABLE not in RuntimeSpec(dsh_home=home, compile_cache="off", inherit_env=False).process_env()
    with pytest.raises(ValueError, match="compile_cache"):
        RuntimeSpec(dsh_home=home, compile_cache="yes")
    # not a dsh: another program's environment is left as it is
    monkeypatch.delenv(VARIABLE)
    assert VARIABLE not in RuntimeSpec.simulator(dsh_home=home, compile_cache="on").process_env()
    assert VARIABLE not in RuntimeSpec(command=("/bin/true",), dsh_home=home).process_env()


async def _start(spec: RuntimeSpec) -> str:
    """Start the runtime, return its stderr so far (after ``initialize``), close it."""
    with trio.fail_after(240):
        async with open_runtime(spec, gateway=None) as runtime:
            return runtime.actor.stderr.text()


def _entries(home: Path) -> list[Path]:
    return [p for p in compile_cache_dir(home).glob("v*/*") if p.is_file()]  # <node version>-<arch>-<flags>-<uid>/<entry>


@pytest.mark.integration
async def test_the_real_runtime_writes_the_cache_on_its_second_start_then_reads_it(
        dsh_spec: Callable[..., RuntimeSpec], dsh_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    await _start(dsh_spec())
    assert (dsh_home / "profiles").is_dir() and not compile_cache_dir(dsh_home).exists()
    await _start(dsh_spec())
    assert len(_entries(dsh_home)) > 100, sorted(p.name for p in compile_cache_dir(dsh_home).rglob("*"))[:20]
    # Node says what it does with NODE_DEBUG_NATIVE; every entry read back is accepted
    said = await _start(dsh_spec(env={"NODE_DEBUG_NATIVE": "COMPILE_CACHE"}, stderr_tail_lines=20000))
    assert said.count("was accepted") > 100, said[-2000:]
    assert "was rejected" not in said and "mismatch" not in said


@pytest.mark.integration
async def test_the_real_runtime_writes_none_when_off(dsh_spec: Callable[..., RuntimeSpec], dsh_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    (dsh_home / "profiles").mkdir()  # a home used before
    await _start(dsh_spec(compile_cache="off"))
    assert not compile_cache_dir(dsh_home).exists()
