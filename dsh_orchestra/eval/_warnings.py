"""The summary's warnings about scores: items left out of a mean, scorers that failed.

Pure: the summary's ``scores`` and the failures counted by ``EvalTally`` in, one line per
problem out (the CLI prints each as ``dsh-orchestra: warning: ...``; the summary lists them).
"""

from __future__ import annotations

from typing import Any, Mapping


def _fmt(value: Any) -> str:
    return "null" if not isinstance(value, (int, float)) else f"{value:.3f}"


def excluded_warnings(scores: Mapping[str, Any]) -> list[str]:
    """One line per scorer with ``n_error > 0``: how many items its mean leaves out, and the
    strict mean in which they score 0."""
    out = []
    for name, entry in scores.items():
        if not isinstance(entry, Mapping):
            continue
        n_error = entry.get("n_error") or 0
        if not n_error:
            continue
        found = entry.get("strict")
        strict: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        items = "item" if n_error == 1 else "items"
        out.append(
            f"{name}: {n_error} {items} excluded from the mean (ended in error, or the scorer failed): "
            f"mean {_fmt(entry.get('mean'))} over {entry.get('n', 0)} scored; "
            f"strict mean {_fmt(strict.get('mean'))} over {strict.get('n', 0)} (an error scores 0)"
        )
    return out


def failure_warnings(failures: Mapping[str, tuple[int, str | None]], scores: Mapping[str, Any]) -> list[str]:
    """One line per scorer that failed on some item that ran (``failures``: name -> (count,
    the first error)), and one per scorer with no value on any item that ran (``no_value``)."""
    out = []
    for name, (count, first) in failures.items():
        if count:
            times = "time" if count == 1 else "times"
            out.append(f"scorer {name!r} failed {count} {times} on items that ran; the first error: {first}")
    for name in no_value(scores, failures):
        out.append(f"scorer {name!r} produced no value on any item that ran: see its errors in the result lines' scores")
    return out


def no_value(scores: Mapping[str, Any], failures: Mapping[str, tuple[int, str | None]]) -> list[str]:
    """The scorers that failed on every item that ran (none scored, none not applicable)."""
    out = []
    for name, entry in scores.items():
        failed = failures.get(name, (0, None))[0]
        if isinstance(entry, Mapping) and failed and not entry.get("n") and not entry.get("n_na"):
            out.append(str(name))
    return out
