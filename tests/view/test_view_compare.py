"""The viewer's comparison reads only what ``compare_runs`` needs of each line, streamed
through the offset index (no response, metadata or conversation held), and computes the same
document as from the whole lines."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from dsh_orchestra.eval import compare_runs
from dsh_orchestra.view._app import run_lines
from dsh_orchestra.view._runs import Run


def lines(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(60):
        for epoch in (1, 2):
            failed = rng.random() < 0.1
            out.append({
                "id": f"item-{i:02d}", "epoch": epoch, "status": "error" if failed else "ok", "final_response": "x" * rng.randint(10, 400),
                "metadata": {"topic": "ab"[i % 2]}, "duration_s": rng.random(), "cost_usd": rng.random() / 100,
                "usage": {"input_tokens": 10, "output_tokens": rng.randint(1, 50), "total_tokens": 60, "cache_read_tokens": 3},
                "scores": {"exact": {"value": None if failed else rng.randint(0, 1), "answer": "a", "explanation": "long " * 20,
                                     **({"error": True} if failed else {})},
                           "f1": {"value": rng.random(), "answer": None, "explanation": None}},
            })
    return out


def write(path: Path, rows: list[dict[str, Any]]) -> Run:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    run = Run(0, path)
    run.index.refresh()
    while run.index.parse(7):
        pass
    return run


def test_the_same_document_from_the_slim_lines(tmp_path: Path) -> None:
    base_rows, candidate_rows = lines(1), lines(2)
    base, candidate = write(tmp_path / "a.jsonl", base_rows), write(tmp_path / "b.jsonl", candidate_rows)
    slim = run_lines(base)
    assert len(slim) == len(base_rows) and all("final_response" not in line and "metadata" not in line for line in slim)
    assert all(set(line["scores"]["exact"]) <= {"value", "error"} for line in slim)
    assert compare_runs(slim, run_lines(candidate)) == compare_runs(base_rows, candidate_rows)
