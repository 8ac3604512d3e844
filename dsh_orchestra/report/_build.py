"""``write_report``: the files of a batch (or a workflow result) in, one HTML file out."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .._logging import registered_secrets
from .._paths import check_paths
from .._redact import Redactor, environment_secrets
from ._data import DEFAULT_MAX_TEXT, DEFAULT_MAX_TRANSCRIPT, build_payload
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
    max_transcript: int = DEFAULT_MAX_TRANSCRIPT,
    group_by: str | None = None,
    compare: str | os.PathLike[str] | None = None,
    seed: int = 0,
    secrets: Iterable[str] | None = None,
) -> Path:
    """Write the self-contained HTML report to ``out`` and return its path.

    Give ``results`` (a batch's JSON Lines) and/or ``workflow`` (``WorkflowResult.to_json()``
    as JSON). ``summary``, ``audit`` and ``dataset`` (for the prompts) add to a batch report;
    ``transcripts`` is the batch's transcripts directory, linked relative to ``out``,
    each item's conversation embedded (at most ``max_transcript`` characters of it). Texts
    longer than ``max_text`` characters are cut (the report says so). ``group_by`` (a metadata
    key) adds per-group metrics; ``compare`` (a baseline's results file) adds the comparison of
    ``results`` against it, its statistics seeded by ``seed``.

    Every text of the page is redacted of ``secrets`` (default: the values of this process's
    secret-named environment variables, e.g. ``DEEPSEEK_API_KEY``) and of every value given to
    ``register_secrets``: a results file written before its run redacted them (or by another
    tool) does not carry a key into the page.

    Raises:
        PathConflictError: ``out`` is one of the inputs (nothing is written).
        ReportInputError: no input, or an input is missing or malformed.
        CompareInputError: ``compare`` has no item in common with ``results``.
        OSError: ``out`` cannot be written.
    """
    path = Path(out)
    check_paths({"results": results, "summary": summary, "audit": audit, "dataset": dataset,
                 "workflow": workflow, "transcripts": transcripts, "compare": compare}, {"out": out})
    payload = build_payload(
        results=results, summary=summary, audit=audit, dataset=dataset, workflow=workflow,
        transcripts=transcripts, out=path, title=title, max_text=max_text, max_transcript=max_transcript,
        group_by=group_by, compare=compare, seed=seed,
    )
    return write_page(path, payload, secrets=secrets)


def write_page(out: str | os.PathLike[str], payload: dict[str, Any], *, secrets: Iterable[str] | None = None) -> Path:
    """Render ``payload`` and write it to ``out`` atomically (a temporary name, then renamed).

    Every text is redacted first: of ``secrets`` (default: the environment's secret-named
    values) and of every registered secret.
    """
    path = Path(out)
    redactor = Redactor(environment_secrets(os.environ) if secrets is None else secrets)
    redactor.add(registered_secrets())
    data = render_html(redactor.value(payload)).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path
