"""Run one document's Python fragments in order, in one namespace: ``python run_fragments.py FILE``.

FILE is JSON: ``[{"where": ..., "code": ...}, ...]``. Prints one JSON line per fragment:
``{"where", "ok", "error"}``; stops at the first failure (later fragments depend on it).
Top-level ``await`` is allowed; the namespace starts with the public API (see docs_blocks).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import trio

MARK = "@@docs-fragment@@ "
PUBLIC = ("dsh_orchestra", "dsh_orchestra.approvals", "dsh_orchestra.questions", "dsh_orchestra.runtime",
          "dsh_orchestra.session", "dsh_orchestra.testing", "dsh_orchestra.workflow", "dsh_orchestra.batch",
          "dsh_orchestra.pool")


def namespace(home: str, workspace: str) -> dict[str, Any]:
    import importlib

    ns: dict[str, Any] = {"__name__": "__docs__", "trio": trio, "os": os, "Path": Path}
    for name in PUBLIC:
        module = importlib.import_module(name)
        ns.update({n: getattr(module, n) for n in getattr(module, "__all__", ()) if not n.startswith("_")})
    ns["home"], ns["workspace"] = home, workspace
    ns["spec"] = ns["RuntimeSpec"].simulator(dsh_home=home, cwd=workspace)
    return ns


def free_names(tree: ast.AST) -> set[str]:
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return loaded - stored


async def main(fragments: list[dict[str, str]]) -> int:
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as workspace:
        ns = namespace(home, workspace)
        async with contextlib.AsyncExitStack() as stack:
            for fragment in fragments:
                try:
                    source, where = fragment["code"], fragment["where"]
                    code = compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                    tree = compile(source, where, "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                    needed = free_names(tree)
                    if ("runtime" in needed or "session" in needed) and not getattr(ns.get("runtime"), "alive", False):
                        ns["runtime"] = await stack.enter_async_context(ns["open_runtime"](ns["spec"]))
                    if "session" in needed and "session" not in ns:
                        ns["session"] = ns["runtime"].session()
                    with trio.fail_after(120):
                        result = eval(code, ns)  # noqa: S307 (the docs' own examples)
                        if result is not None and hasattr(result, "__await__"):
                            await result
                except BaseException as exc:  # noqa: BLE001 (reported)
                    text = "".join(traceback.format_exception(exc))[-3000:]
                    print(MARK + json.dumps({"where": fragment["where"], "ok": False, "error": text}), flush=True)
                    return 1
                print(MARK + json.dumps({"where": fragment["where"], "ok": True, "error": None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
