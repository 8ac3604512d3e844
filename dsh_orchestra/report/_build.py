"""``write_report``: the files of a batch (or a workflow result) in, one HTML file out."""

from __future__ import annotations

import os
from pathlib import Path

from ._data import DEFAULT_MAX_TEXT, build_payload
from ._html import render_html


def write_report(
    out: str | os.PathLike[str] = "report.html",
    *,
    results: str | os.PathLike[str] | None = None,
    summary: str | os.PathLike[str] | None = None,
    audit: str | os.PathLike[str] | None = None,
    dataset: str | os.PathLike[str] | None = None,
    workflow: str | os.PathLike[str] | None = None,
    transcripts: str | os.PathLike[str] | None = None,
    title: str | None = None,
    max_text: int = DEFAULT_MAX_TEXT,
) -> Path:
    """Write the self-contained HTML report to ``out`` and return its path.

    Give ``results`` (a batch's JSON Lines) and/or ``workflow`` (``WorkflowResult.to_json()``
    as JSON). ``summary``, ``audit`` and ``dataset`` (for the prompts) add to a batch report;
    ``transcripts`` is the ``--transcripts`` directory of the batch, linked relative to ``out``.
    Texts longer than ``max_text`` characters are cut (the report says so).

    Raises:
        ReportInputError: no input, or an input is missing or malformed.
        OSError: ``out`` cannot be written.
    """
    path = Path(out)
    payload = build_payload(
        results=results, summary=summary, audit=audit, dataset=dataset, workflow=workflow,
        transcripts=transcripts, out=path, title=title, max_text=max_text,
    )
    data = render_html(payload).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
    return path
