"""RuntimeSpec.compile_cache: a dsh keeps V8's compile cache in its DSH_HOME (NODE_COMPILE_CACHE).

Who gets the variable and where it points (unit), and on the real bundled runtime under the
sandbox: the first start on a fresh home writes the cache there, the next start on that home
has its compiled code accepted from it, and ``compile_cache=False`` writes none.
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


def test_a_dsh_gets_a_cache_in_its_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/inherited/elsewhere")  # the sandbox would not let it write there
    home = tmp_path / "home"
    expected = str(home / ".cache" / "node-compile-cache")
    assert compile_cache_dir(home) == Path(expected)
    assert RuntimeSpec(dsh_home=home).process_env()[VARIABLE] == expected  # the bundled dsh
    patched = RuntimeSpec(command=("/opt/dsh",), append_profile=True, dsh_home=home)
    assert patched.process_env()[VARIABLE] == expected
    assert RuntimeSpec(dsh_home=home, inherit_env=False).process_env()[VARIABLE] == expected


def test_the_spec_env_wins_and_it_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "/inherited")
    home = tmp_path / "home"
    assert RuntimeSpec(dsh_home=home, env={VARIABLE: "/mine"}).process_env()[VARIABLE] == "/mine"
    assert RuntimeSpec(dsh_home=home, compile_cache=False).process_env()[VARIABLE] == "/inherited"
    assert VARIABLE not in RuntimeSpec(dsh_home=home, compile_cache=False, inherit_env=False).process_env()
    # not a dsh: another program's environment is left as it is
    monkeypatch.delenv(VARIABLE)
    assert VARIABLE not in RuntimeSpec.simulator(dsh_home=home).process_env()
    assert VARIABLE not in RuntimeSpec(command=("/bin/true",), dsh_home=home).process_env()


async def _start(spec: RuntimeSpec) -> str:
    """Start the runtime, return its stderr so far (after ``initialize``), close it."""
    with trio.fail_after(240):
        async with open_runtime(spec, gateway=None) as runtime:
            return runtime.actor.stderr.text()


@pytest.mark.integration
async def test_the_real_runtime_writes_the_cache_then_reads_it(dsh_spec: Callable[..., RuntimeSpec], dsh_home: Path) -> None:
    cache = compile_cache_dir(dsh_home)
    await _start(dsh_spec())
    written = [p for p in cache.glob("v*/*") if p.is_file()]  # <node version>-<arch>-<flags hash>/<entry>
    assert len(written) > 100, sorted(p.name for p in cache.rglob("*"))[:20]
    # Node says what it does with NODE_DEBUG_NATIVE; every entry read back is accepted
    said = await _start(dsh_spec(env={"NODE_DEBUG_NATIVE": "COMPILE_CACHE"}, stderr_tail_lines=20000))
    assert said.count("was accepted") > 100, said[-2000:]
    assert "was rejected" not in said and "mismatch" not in said


@pytest.mark.integration
async def test_the_real_runtime_writes_none_when_off(dsh_spec: Callable[..., RuntimeSpec], dsh_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    await _start(dsh_spec(compile_cache=False))
    assert not compile_cache_dir(dsh_home).exists()
