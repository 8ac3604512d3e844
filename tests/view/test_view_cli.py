"""`dsh-orchestra view` on bad input: clear messages and exit 2, nothing served; and the API
over a file that is cut mid-line or rewritten while it is viewed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from report_support import cli
from view_support import RunningViewer


def test_a_path_without_results(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here", encoding="utf-8")
    done = cli("view", tmp_path, "--port", "0", timeout=60)
    assert done.returncode == 2
    assert "no results file of `dsh-orchestra batch`" in done.stderr and str(tmp_path) in done.stderr
    assert "Traceback" not in done.stderr
    missing = cli("view", tmp_path / "nope.jsonl", "--port", "0", timeout=60)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n', encoding="utf-8")
    wrong = cli("view", other, "--port", "0", timeout=60)
    assert wrong.returncode == 2 and "is not a results file" in wrong.stderr


def test_a_port_in_use(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_bytes(orjson.dumps({"id": "a", "status": "ok"}) + b"\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = cli("view", results, "--port", str(port), timeout=60)
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use; give another --port" in done.stderr
    assert "Traceback" not in done.stderr
    bad = cli("view", results, "--port", "70000", timeout=60)
    assert bad.returncode == 2 and "--port" in bad.stderr


def test_the_command_serves_prints_its_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    results.write_bytes(orjson.dumps({"id": "a", "status": "ok"}) + b"\n")
    script = Path(sys.executable).with_name("dsh-orchestra")
    process = subprocess.Popen([str(script), "view", str(results), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("dsh-orchestra view: http://127.0.0.1:")
        url = first.split(": ", 1)[1].strip()
        base, _, token = url.partition("/?token=")
        assert len(token) >= 20
        with urllib.request.urlopen(f"{base}/api/runs?token={token}", timeout=30) as answer:  # noqa: S310 - loopback
            assert json.loads(answer.read())["runs"][0]["items"] == 1
        process.terminate()  # SIGTERM stops it as Ctrl-C does: 143, one line, no traceback
        _, err = process.communicate(timeout=30)
        assert process.returncode == 143, err
        assert "dsh-orchestra: terminated (SIGTERM)" in err and "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


def get(v: RunningViewer, path: str, **params: str) -> Any:
    with urllib.request.urlopen(v.page(path, **params), timeout=30) as answer:  # noqa: S310 - loopback
        return json.loads(answer.read())


def test_cut_and_rewritten_files(viewer: Callable[..., RunningViewer], tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    lines = [orjson.dumps({"id": f"i{n}", "status": "ok", "final_response": f"r{n}"}) + b"\n" for n in range(4)]
    results.write_bytes(b"".join(lines[:3]) + lines[3][:7])  # a torn last line
    v = viewer(results)
    run = get(v, "/api/run/0")
    assert run["lines"] == 3 and run["pending_bytes"] == 7 and run["problem"] is None
    assert [row["id"] for row in get(v, "/api/run/0/items")["items"]] == ["i0", "i1", "i2"]
    results.write_bytes(lines[2] + lines[0])  # rewritten underneath: shorter, other order
    page = get(v, "/api/run/0/items")
    assert [row["id"] for row in page["items"]] == ["i2", "i0"] and page["generation"] == 1
    results.unlink()
    gone = get(v, "/api/run/0")
    assert "is gone" in gone["problem"]


def test_the_first_page_while_the_index_is_built(viewer: Callable[..., RunningViewer], tmp_path: Path, monkeypatch: Any) -> None:
    """The background task indexes in small steps (lowered here) in a worker thread that gives
    way to requests; a request for a run whose first lines are not read yet waits for them (the
    thread must not give way to that request): the first page has its 50 rows at once."""
    monkeypatch.setattr("dsh_orchestra.view._app.STEP_BYTES", 64 << 10)
    monkeypatch.setattr("dsh_orchestra.view._app.REQUEST_BYTES", 16 << 10)
    results = tmp_path / "r.jsonl"
    results.write_bytes(b"".join(orjson.dumps({"id": f"i{n:05d}", "status": "ok", "final_response": "r" * 60}) + b"\n"
                                 for n in range(30_000)))
    v = viewer(results)
    page = get(v, "/api/run/0/items")
    assert [row["id"] for row in page["items"]] == [f"i{n:05d}" for n in range(50)]
    deadline = time.monotonic() + 120
    run = get(v, "/api/run/0")
    while (run["parsed"] < 30_000 or run["unread_bytes"]) and time.monotonic() < deadline:
        time.sleep(0.3)  # a page polls every 0.5 s; between requests the indexing thread goes on
        run = get(v, "/api/run/0")
    assert run["lines"] == run["items"] == 30_000
