"""The scale-out parts that need no Ray: the import boundary, the CLI options, portable specs
and errors, and the threaded pool host (with simulator processes). What happens to an item
whose actor is lost is the batch run loop's (tests/batch/test_batch_executor.py)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dsh_orchestra.batch import Attempt, BatchItem, BatchOptions
from dsh_orchestra.cli._main import build_parser
from dsh_orchestra.protocol import RuntimeStartError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.scale import HostConfig, PoolHost, RemoteError, split_spec
from dsh_orchestra.scale._portable import API_KEY

from scale_support import our_runtimes, run_cli, sim_spec

SECRET_KEY = "sk-test-secret-key-0123456789"
SECRET_TOKEN = "tok-secret-value-9876543210"
INHERITED = "sk-inherited-driver-key-55555"


def test_importing_the_package_and_the_cli_does_not_import_ray() -> None:
    """Ray is an optional extra: the core, the batch layer, the CLI and even scale do not import it."""
    code = (
        "import sys\n"
        "import dsh_orchestra, dsh_orchestra.batch, dsh_orchestra.cli, dsh_orchestra.scale\n"
        "from dsh_orchestra.cli._main import build_parser\n"
        "build_parser().parse_args(['batch', 'ds.jsonl', '--out', 'r.jsonl', '--ray', '--ray-actors', '3'])\n"
        "loaded = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.'))\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_without_ray_the_ray_option_is_a_usage_error(tmp_path: Path) -> None:
    """``--ray`` where Ray is not installed: exit status 2 and the install command."""
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "hi"}\n')
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if it were not installed\n"
        "from dsh_orchestra.cli import main\n"
        f"sys.exit(main(['batch', {str(dataset)!r}, '--out', {str(tmp_path / 'r.jsonl')!r}, '--ray', '--no-progress']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "pip install 'dsh-orchestra[ray]'" in done.stderr
    assert not (tmp_path / "r.jsonl").exists()  # refused before the results file is made


@pytest.mark.parametrize(
    ("argv", "address"),
    [([], None), (["--ray"], ""), (["--ray", "auto"], "auto"), (["--ray", "10.0.0.5:6379"], "10.0.0.5:6379"),
     (["--ray=ray://head:10001"], "ray://head:10001")],
)
def test_ray_option_takes_an_optional_address(argv: list[str], address: str | None) -> None:
    args = build_parser().parse_args(["batch", "ds.jsonl", "--out", "r.jsonl", *argv, "--ray-actors", "3"])
    assert args.ray == address
    assert args.ray_actors == 3
    assert args.runtimes_per_actor is None


def _ray_kwargs(tmp_path: Path, *argv: str) -> dict[str, object]:
    from dsh_orchestra.cli._ray_options import ray_options

    args = build_parser().parse_args(["batch", "ds.jsonl", "--out", "r.jsonl", "--ray", "auto", *argv])
    return ray_options(args, RuntimeSpec.simulator(dsh_home=tmp_path), None)


def test_ray_actor_resources_option_takes_an_object_a_list_or_a_file(tmp_path: Path) -> None:
    from dsh_orchestra.scale import RayExecutor

    assert _ray_kwargs(tmp_path)["actor_resources"] is None
    assert _ray_kwargs(tmp_path, "--ray-actor-resources", '{"gpu_box": 1}')["actor_resources"] == {"gpu_box": 1}
    listed = '[{"node_a": 1}, {"node_b": 0.5}]'
    (tmp_path / "resources.json").write_text(listed)
    for value in (listed, str(tmp_path / "resources.json")):
        kwargs = _ray_kwargs(tmp_path, "--ray-actor-resources", value)
        assert kwargs["actor_resources"] == [{"node_a": 1}, {"node_b": 0.5}]
        executor = RayExecutor(**kwargs)  # type: ignore[arg-type]
        assert executor.actor_resources == ({"node_a": 1.0}, {"node_b": 0.5})
    assert RayExecutor(actor_resources={"gpu_box": 2}).actor_resources == ({"gpu_box": 2.0},)


@pytest.mark.parametrize("value", ['[]', '{"node_a": 0}', '[{"node_a": 1}, 3]', '{"node_a": true}', '"node_a"', "{nope"])
def test_bad_ray_actor_resources_name_the_option(tmp_path: Path, value: str) -> None:
    from dsh_orchestra.scale import RayExecutor

    with pytest.raises(ValueError, match="--ray-actor-resources"):
        _ray_kwargs(tmp_path, "--ray-actor-resources", value)
    try:
        python_value = __import__("json").loads(value)
    except ValueError:
        return
    with pytest.raises(ValueError, match="actor_resources"):
        RayExecutor(actor_resources=python_value)


def test_each_actor_slot_gets_its_resources_in_turn() -> None:
    from dsh_orchestra.scale import RayExecutor
    from dsh_orchestra.scale._ray import RayRunner

    executor = RayExecutor(actors=3, actor_resources=[{"node_a": 1}, {"node_b": 1}])
    runner = RayRunner.__new__(RayRunner)  # only the placement part: no Ray needed
    runner.executor = executor
    runner.actor_options = {"num_cpus": 1.0, "resources": {"fast_disk": 1.0}}
    assert [runner.slot_options(i)["resources"] for i in range(3)] == [
        {"fast_disk": 1.0, "node_a": 1.0}, {"fast_disk": 1.0, "node_b": 1.0}, {"fast_disk": 1.0, "node_a": 1.0}]
    assert runner.slot_options(1)["num_cpus"] == 1.0 and runner.actor_options["resources"] == {"fast_disk": 1.0}


def test_bad_ray_actor_resources_is_exit_2_before_anything_runs(tmp_path: Path) -> None:
    dataset = tmp_path / "ds.jsonl"
    dataset.write_text('{"id": "a", "prompt": "hi"}\n')
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--ray", "--ray-actor-resources",
                    '[{"node_a": -1}]', "--no-progress"], cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--ray-actor-resources" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_split_spec_keeps_secrets_out_of_the_actor_spec_and_settings() -> None:
    spec = RuntimeSpec.simulator(
        dsh_home="/tmp/home-{actor}", env={"DSH_TELEMETRY_MODE": "DISABLED", "MY_API_TOKEN": SECRET_TOKEN},
        api_key=SECRET_KEY,
    )
    environ = {"DEEPSEEK_BASE_URL": "http://127.0.0.1:9", "DEEPSEEK_API_KEY": INHERITED, "DSH_HOME": "/driver/home",
               "PATH": "/usr/bin", "HOME": "/root"}
    actor_spec, settings, secrets = split_spec(spec, environ=environ)
    assert settings == {"DSH_TELEMETRY_MODE": "DISABLED", "DEEPSEEK_BASE_URL": "http://127.0.0.1:9"}
    assert secrets == {"MY_API_TOKEN": SECRET_TOKEN, "DEEPSEEK_API_KEY": INHERITED, API_KEY: SECRET_KEY}
    assert actor_spec.env_names == ("DEEPSEEK_BASE_URL", "DSH_TELEMETRY_MODE")
    assert actor_spec.secret_names == tuple(sorted(secrets))
    blob = pickle.dumps(actor_spec)  # what Ray stores as the actor's creation argument
    for value in (SECRET_KEY, SECRET_TOKEN, INHERITED):
        assert value.encode() not in blob
    assert actor_spec.spec.api_key is None and actor_spec.spec.env == {}


def test_split_spec_refuses_an_in_process_runtime() -> None:
    from dsh_orchestra.testing._script import DEFAULT_SCRIPT
    from dsh_orchestra.testing._simulator import open_simulator_stream

    spec = RuntimeSpec(connect=lambda: open_simulator_stream(DEFAULT_SCRIPT))
    with pytest.raises(ValueError, match="cannot run in a Ray actor"):
        split_spec(spec)


def test_rebuild_restores_settings_secrets_and_a_home_per_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = RuntimeSpec.simulator(dsh_home=tmp_path / "home-{actor}", env={"DSH_TELEMETRY_MODE": "DISABLED",
                                                                          "MY_API_TOKEN": SECRET_TOKEN}, api_key=SECRET_KEY)
    actor_spec, settings, secrets = split_spec(spec, environ={})
    for name, value in settings.items():  # what the actor's runtime_env env_vars give it
        monkeypatch.setenv(name, value)
    rebuilt, home = actor_spec.rebuild(secrets, slot=3)
    assert home is None
    assert rebuilt.dsh_home == tmp_path / "home-3" and (tmp_path / "home-3").is_dir()
    assert rebuilt.api_key == SECRET_KEY
    assert rebuilt.env == {"DSH_TELEMETRY_MODE": "DISABLED", "MY_API_TOKEN": SECRET_TOKEN}
    assert SECRET_KEY in rebuilt.secrets() and SECRET_TOKEN in rebuilt.secrets()
    assert rebuilt.command == spec.command

    private, _, _ = split_spec(spec, temp_home=True, environ={})
    moved = attrs_evolve_driver(private, "/elsewhere/python")
    rebuilt, home = moved.rebuild(secrets, slot=0)
    assert home is not None and rebuilt.dsh_home is not None and Path(home.name) == rebuilt.dsh_home
    assert rebuilt.command is not None and rebuilt.command[0] == sys.executable  # this node's interpreter
    home.cleanup()


def attrs_evolve_driver(actor_spec, executable: str):  # type: ignore[no-untyped-def]
    """The same actor spec as if the driver's interpreter lived at ``executable``."""
    import attrs

    command = (executable, *actor_spec.spec.command[1:])
    return attrs.evolve(actor_spec, spec=actor_spec.spec.evolve(command=command), driver_executable=executable)


def test_rebuild_fails_when_a_named_secret_is_missing() -> None:
    spec = RuntimeSpec.simulator(dsh_home="/tmp", api_key=SECRET_KEY)
    actor_spec, _, _ = split_spec(spec, environ={})
    with pytest.raises(Exception, match="did not reach the actor"):
        actor_spec.rebuild({}, slot=0)


def test_remote_errors_survive_pickling_and_rebuild_runtime_start_errors() -> None:
    original = RuntimeStartError("sim", "sdk", "handshake rejected", "last words")
    carried = pickle.loads(pickle.dumps(RemoteError.of(original)))
    local = carried.local()
    assert isinstance(local, RuntimeStartError)
    assert (local.command, local.profile, local.reason, local.stderr_tail) == ("sim", "sdk", "handshake rejected", "last words")
    assert str(local) == str(original)
    group = RemoteError.of(ExceptionGroup("x", [ValueError("inner")]))
    assert pickle.loads(pickle.dumps(group)).type_name == "ValueError"
    assert group.local() is group


# ---- the pool host, without Ray ---------------------------------------------------------------


def test_pool_host_runs_items_from_many_threads_on_one_trio_thread(tmp_path: Path) -> None:
    actor_spec, settings, secrets = split_spec(sim_spec(tmp_path))
    config = HostConfig.for_items(actor_spec, BatchOptions(), slot=0, runtimes=2, in_flight=6)
    host = PoolHost(config, secrets)
    info = host.start()
    assert info.runtimes == 2 and info.pid == os.getpid()
    assert len(our_runtimes(tmp_path)) == 2  # started once, for every item
    items = [BatchItem(id=f"h{n}", prompt=("E400 " if n == 4 else "TICK ") + str(n)) for n in range(12)]
    threads: set[str] = set()

    def run(item: BatchItem) -> Attempt:
        threads.add(threading.current_thread().name)
        return host.process(item, f"session-{item.id}")

    try:
        with ThreadPoolExecutor(6) as executor:
            attempts = list(executor.map(run, items))
        assert host.statistics()["live"] == 2
    finally:
        host.close()
    assert [a.session_id for a in attempts] == [f"session-{item.id}" for item in items]
    assert all(a.error is None and not a.lost and a.turn is not None for a in attempts)
    assert [a.turn.finish_reason for a in attempts if a.turn] == ["completed"] * 4 + ["error"] + ["completed"] * 7
    assert attempts[0].turn is not None and attempts[0].turn.final_response == "tock" and len(threads) > 1
    sent = pickle.loads(pickle.dumps(attempts[0]))  # what Ray sends back to the driver: the whole turn
    assert sent.turn is not None and attempts[0].turn is not None
    assert list(sent.turn.events) == list(attempts[0].turn.events) and sent.turn.events
    assert (sent.turn.final_response, sent.session_id) == (attempts[0].turn.final_response, attempts[0].session_id)
    assert our_runtimes(tmp_path) == []  # close() reaped every runtime
    with pytest.raises(Exception, match="not running"):
        host.process(items[0], "again")


def test_pool_host_start_reports_the_runtime_start_error(tmp_path: Path) -> None:
    spec = RuntimeSpec(command=[str(tmp_path / "no-such-runtime")], dsh_home=tmp_path, cwd=tmp_path)
    actor_spec, _, secrets = split_spec(spec)
    host = PoolHost(HostConfig.for_items(actor_spec, BatchOptions(), slot=0, runtimes=1, in_flight=1), secrets)
    with pytest.raises(RemoteError) as caught:
        host.start()
    host.close()
    assert isinstance(caught.value.local(), RuntimeStartError)


def test_local_head_auth_mode_follows_ray_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode a local head gets (and its driver shares): explicit, else token iff a token exists."""
    from dsh_orchestra.scale._local import auth_mode

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert auth_mode() == "disabled"
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    assert auth_mode() == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert auth_mode() == "disabled"


def test_host_config_makes_the_audit_and_transcripts_paths_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor's working directory is not the driver's: relative ``--audit``/``--transcripts`` are
    resolved on the driver (a relative audit log once landed in the Ray head's directory)."""
    monkeypatch.chdir(tmp_path)
    actor_spec, _, _ = split_spec(sim_spec(tmp_path))
    config = HostConfig.for_items(actor_spec, BatchOptions(audit="audit.jsonl", transcripts=Path("tr")),
                                  slot=0, runtimes=1, in_flight=2)
    assert config.options.audit == str(tmp_path / "audit.jsonl")
    assert config.options.transcripts == str(tmp_path / "tr")
    assert HostConfig.for_items(actor_spec, BatchOptions(), slot=0, runtimes=1, in_flight=2).options.audit is None


def test_ray_serial_holds_an_exclusive_lock_among_xdist_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock that keeps two Ray clusters of one xdist run apart (tests/ray_serial.py)."""
    from ray_serial import ray_serial

    class Factory:
        def getbasetemp(self) -> Path:
            return tmp_path / "popen-gw0"

    try_lock = ("import fcntl, sys\nf = open(sys.argv[1], 'a')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                "except BlockingIOError:\n    sys.exit(3)\n")
    lock = str(tmp_path / "ray-serial.lock")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    with ray_serial(Factory()), ray_serial(Factory()):  # type: ignore[arg-type]  # re-entrant
        assert subprocess.run([sys.executable, "-c", try_lock, lock], timeout=60).returncode == 3  # another worker waits
    assert subprocess.run([sys.executable, "-c", try_lock, lock], timeout=60).returncode == 0  # released
