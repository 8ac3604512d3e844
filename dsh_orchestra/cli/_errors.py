"""The one table from library parameter names to the CLI's flags, and errors rendered with it.

Library errors name parameters the Python way (``out=``, ``resume=True``) and carry them as
``Param`` parts (``dsh_orchestra._params``); the CLI shows the same errors with its flags.
"""

from __future__ import annotations

from .._params import Param, ParamError

FLAGS = {
    "address": "--ray",
    "answerer": "--answerer",
    "answers": "--answer",
    "audit": "--audit",
    "base": "BASE",
    "candidate": "CANDIDATE",
    "checkpoint": "--checkpoint",
    "concurrency": "--concurrency",
    "dataset": "DATASET",
    "dsh_home": "--dsh-home",
    "epoch_reducer": "--epoch-reducer",
    "epochs": "--epochs",
    "keep_workspaces": "--keep-workspaces",
    "max_runtime_rss_mib": "--max-runtime-rss",
    "max_sessions_per_runtime": "--max-sessions-per-runtime",
    "max_total_cost": "--max-total-cost",
    "prices": "--prices",
    "workspace_template": "--workspace-template",
    "inputs": "--input",
    "log_file": "--log-file",
    "log_level": "--log-level",
    "mermaid": "--mermaid",
    "out": "--out",
    "policy": "--policy",
    "recipe": "RECIPE",
    "results": "RESULTS",
    "resume": "--resume",
    "retries": "--retries",
    "runtimes": "--runtimes",
    "score": "--score",
    "scorers": "--score",
    "scoring": "--scoring",
    "script": "--script",
    "shard": "--shard",
    "summary": "--summary",
    "timeout": "--timeout",
    "transcripts": "--transcripts",
    "workflow": "--workflow",
    "workspace": "--workspace",
}
"""Library parameter -> the flag (or positional name) that sets it; the CLI's one table (a
parameter not listed: ``--`` + its name)."""


def flag(name: str) -> str:
    """The flag of library parameter ``name``."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def spell_flag(param: Param) -> str:
    """``--flag 'value'`` (or the bare flag)."""
    return f"{flag(param.name)} {param.value!r}" if param.shows_value else flag(param.name)


def message(exc: BaseException | str) -> str:
    """``exc``'s message as the CLI says it (flags for parameters)."""
    if isinstance(exc, ParamError):
        return exc.render(spell_flag)
    return str(exc)
