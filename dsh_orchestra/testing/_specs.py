"""RuntimeSpec helpers for tests and users: the in-process simulator as a runtime spec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..runtime import RuntimeSpec
from ._script import DEFAULT_SCRIPT, Script, load_script
from ._simulator import open_simulator_stream


def in_process_spec(
    script: Script | str | os.PathLike[str] | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    sim_options: dict[str, Any] | None = None,
    **spec_fields: Any,
) -> RuntimeSpec:
    """A RuntimeSpec whose runtime is a simulator over trio memory streams (no process).

    ``script`` is a Script or a path to a scenario file; ``store`` persists sessions;
    ``sim_options`` are SimOptions fields; other keywords are RuntimeSpec fields.
    """
    parsed = DEFAULT_SCRIPT if script is None else script if isinstance(script, Script) else load_script(script)
    options = dict(sim_options or {})

    def connect() -> Any:
        return open_simulator_stream(parsed, store=Path(store) if store is not None else None, **options)

    spec_fields.setdefault("name", "sim-in-process")
    return RuntimeSpec(connect=connect, cwd=Path(cwd) if cwd is not None else Path.cwd(), **spec_fields)
