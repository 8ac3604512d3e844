"""The golden batch: a fixed run on the in-process simulator (fixed script, dataset, seed,
scorers, epochs, prices, group-by), then ``score``, ``compare`` and a report's data over it.

``produce(directory)`` runs it all in ``directory`` and returns each artifact's bytes with
only what varies run to run masked: versions, times, durations (and what is computed from
them), session ids (a random token per run; subagents' uuids), and the directory itself. ``python
tests/results/golden_support.py`` rewrites tests/results/golden/ (only ever from code whose
output is the reference: the golden was written before the result-line refactor, issue 24).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import trio

from dsh_orchestra.batch import BatchOptions, run_batch
from dsh_orchestra.cli import main as cli_main
from dsh_orchestra.report._data import build_comparison, build_payload
from dsh_orchestra.runtime import RuntimeSpec

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # run as a script (the docstring's regeneration): tests/ holds the shared support
    sys.path.insert(0, _TESTS)
from scored_scenario_support import PRICES, scenario_spec  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden"


DATASET = [
    {"id": "fr", "prompt": "Capital of France?", "target": "Paris", "metadata": {"kind": "geo", "n": 1}},
    {"id": "num", "prompt": "6 x 7?", "target": ["42", "forty-two"], "metadata": {"kind": "math"}},
    {"id": "miss", "prompt": "Capital of Peru?", "target": "Lima", "metadata": {"kind": "geo"}},
    {"id": "bad", "prompt": "E400 please", "target": "x", "metadata": {"kind": "math"}},
    {"id": "kids", "prompt": "SPAWN helpers", "target": "42", "metadata": {}},
    {"id": "pick", "prompt": "Pick France", "target": "B", "choices": ["Lyon", "Paris"], "metadata": {"kind": 3}},
]

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # a subagent's session id
_TIMES = ("duration_s", "items_per_s", "p50_s", "p95_s", "start_time", "end_time", "generated")


def spec() -> RuntimeSpec:
    return scenario_spec("<golden>")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def _mask(value: Any, root: str) -> Any:
    """``value`` with the run-to-run differences replaced by fixed text."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            if key in _TIMES and inner is not None:
                out[key] = "<time>"
            elif key in ("dsh_orchestra_version", "version") and isinstance(inner, str):
                out[key] = "<version>"
            elif key == "argv":
                out[key] = "<argv>"
            elif key == "session_id" and isinstance(inner, str) and inner.startswith("item-"):
                out[key] = "<session>"
            else:
                out[key] = _mask(inner, root)
        return out
    if isinstance(value, list):
        return [_mask(v, root) for v in value]
    if isinstance(value, str):
        return _UUID.sub("<uuid>", value.replace(root, "<dir>"))
    return value


def _masked_jsonl(path: Path, root: str) -> bytes:
    """Each line re-encoded (orjson, as written) after masking: key order and number text kept."""
    return b"".join(orjson.dumps(_mask(orjson.loads(line), root)) + b"\n" for line in path.read_bytes().splitlines())


def _masked_json(value: Any, root: str) -> bytes:
    return orjson.dumps(_mask(value, root), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def _fixed_times(path: Path, out: Path) -> Path:
    """``path``'s lines with fixed durations and session ids: deterministic inputs for
    ``score``, ``compare`` and the report (whose outputs depend on them)."""
    rows = []
    for index, raw in enumerate(path.read_bytes().splitlines()):
        line = orjson.loads(raw)
        line["duration_s"] = round(0.25 + 0.125 * index, 6)
        line["session_id"] = f"s-{index}"
        for number, child in enumerate(line.get("subagents") or ()):
            child["child_session_id"] = f"child-{index}-{number}"
        rows.append(line)
    return _write_jsonl(out, rows)


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(args)
    return code, out.getvalue(), err.getvalue()


async def _batches(directory: Path) -> None:
    dataset = _write_jsonl(directory / "ds.jsonl", DATASET)
    prices = directory / "prices.toml"
    prices.write_text(PRICES)
    common: dict[str, Any] = {"progress": "none", "retries": 0, "concurrency": 1, "prices": prices, "seed": 3,
                              "argv": ["golden"]}
    with trio.fail_after(120):
        await run_batch(dataset, directory / "a.jsonl", spec(), BatchOptions(
            scorers=["exact", "includes", "numeric", "choice", "f1", "judge"], epochs=2, group_by="kind",
            summary=directory / "a.summary.json", **common))
        # resume: four whole lines and a torn fifth, then the rest (epochs 3, pass@2, a token budget first)
        await run_batch(dataset, directory / "b.jsonl", spec(), BatchOptions(
            scorers=["exact", "numeric"], epochs=3, epoch_reducer="pass@2", summary=directory / "b0.summary.json", **common))
        whole = (directory / "b.jsonl").read_bytes().splitlines(keepends=True)
        (directory / "b.jsonl").write_bytes(b"".join(whole[:4]) + whole[4][:23])
        await run_batch(dataset, directory / "b.jsonl", spec(), BatchOptions(
            scorers=["exact", "numeric"], epochs=3, epoch_reducer="pass@2", resume=True, max_total_tokens=40,
            summary=directory / "b1.summary.json", **common))
        await run_batch(dataset, directory / "b.jsonl", spec(), BatchOptions(
            scorers=["exact", "numeric"], epochs=3, epoch_reducer="pass@2", resume=True,
            summary=directory / "b2.summary.json", **common))
        # no scorers, no prices: the plain line and summary
        plain = {k: v for k, v in common.items() if k != "prices"}
        await run_batch(dataset, directory / "c.jsonl", spec(), BatchOptions(summary=directory / "c.summary.json", **plain))


def produce(directory: Path) -> dict[str, bytes]:
    """Run the golden batch in ``directory``; the masked artifacts by name."""
    root = str(directory)
    trio.run(_batches, directory)
    out: dict[str, bytes] = {}
    for name in ("a", "b", "c"):
        out[f"{name}.results.jsonl"] = _masked_jsonl(directory / f"{name}.jsonl", root)
    for name in ("a", "b0", "b1", "b2", "c"):
        out[f"{name}.summary.json"] = _masked_json(orjson.loads((directory / f"{name}.summary.json").read_bytes()), root)
    base = _fixed_times(directory / "a.jsonl", directory / "base.jsonl")
    plain = _fixed_times(directory / "c.jsonl", directory / "plain.jsonl")
    dataset, prices = str(directory / "ds.jsonl"), str(directory / "prices.toml")
    code, stdout, stderr = _cli(["score", str(plain), "--dataset", dataset, "--score", "exact", "--score", "numeric",
                                 "--score", "includes", "--group-by", "kind", "--seed", "5", "--prices", prices,
                                 "--out", str(directory / "cand.jsonl"), "--summary", str(directory / "cand.summary.json"), "--json"])
    assert code == 1, stderr  # c has an error line (docs/batch.md#exit-status)
    out["score.stdout.json"] = _masked_json(orjson.loads(stdout), root)
    out["score.results.jsonl"] = _masked_jsonl(directory / "cand.jsonl", root)
    out["score.summary.json"] = _masked_json(orjson.loads((directory / "cand.summary.json").read_bytes()), root)
    cand = str(directory / "cand.jsonl")
    code, stdout, stderr = _cli(["compare", str(base), cand, "--seed", "2"])
    assert code == 0, stderr
    out["compare.txt"] = stdout.replace(root, "<dir>").encode()
    code, stdout, stderr = _cli(["compare", str(base), cand, "--json", "--score", "exact", "--epoch-reducer", "max"])
    assert code == 0, stderr
    out["compare.json"] = _masked_json(orjson.loads(stdout), root)
    payload = build_payload(results=base, summary=directory / "a.summary.json", dataset=dataset, group_by="kind",
                            compare=str(plain), out=directory / "r.html")
    out["report.payload.json"] = _masked_json(payload, root)
    comparison = build_comparison(str(base), cand, seed=4)
    out["report.comparison.json"] = _masked_json(comparison, root)
    return out


if __name__ == "__main__":
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        for name, data in produce(Path(temporary)).items():
            (GOLDEN / name).write_bytes(data)
            print(f"wrote {GOLDEN / name} ({len(data)} bytes)", file=sys.stderr)
