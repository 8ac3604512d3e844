"""The public API: each package's ``__all__`` (written once), public ``__module__`` paths,
docstrings, the root's curated list, and pickling through the public paths."""

from __future__ import annotations

import ast
import importlib
import pickle
import subprocess
import sys
import traceback
import types
import typing
from pathlib import Path
from typing import Any

import pytest

import dsh_orchestra
from dsh_orchestra._public import ROOT_EXPORTS

PACKAGES = [
    "aio", "approvals", "batch", "cli", "eval", "gateway", "pool", "protocol", "questions", "report", "results", "runtime",
    "scale", "session", "sync", "testing", "transport", "view", "workflow",
]
SOURCE = Path(dsh_orchestra.__file__).parent

ROOT_NAMES = [
    "ApprovalRequest", "ApprovalService", "AuditLog", "BatchOptions", "BatchSummary", "BatchUsageError",
    "CheckpointError", "CommandResult", "Connection", "DatasetError", "Decision", "DecisionRecord", "EvalItem",
    "EvalResult", "FrameTooLargeError", "GatewayOptions", "JsonRpcResponseError", "MethodNotSupportedError", "Notification",
    "OrchestraError", "PoolClosedError", "QuestionAnswerError", "QuestionsRequest", "RequestTimeoutError", "ResultLine",
    "Runtime", "RuntimeActor", "RuntimeExitedError", "RuntimePool", "RuntimeSpec", "RuntimeStartError", "Score",
    "SdkProtocolError", "Session", "StepContext", "StepResult", "SubagentResult", "SubscriberOverflowError",
    "Subscription", "TransportClosedError", "TurnGroup", "TurnResult", "Workflow", "WorkflowOptions", "WorkflowResult",
    "__version__",
    "configure_logging", "enable_tracing", "escalate", "load_dataset", "load_policy", "load_recipe",
    "log_context", "open_places", "open_pool", "open_runtime", "open_workflow", "register_secrets", "replay", "run_batch",
    "run_workflow",
]
"""Pinned: adding or removing a root export is a decision, made here too."""

BATCH_NAMES = [
    "ALONE_AFTER", "Attempt", "AttemptRunner", "BatchItem", "BatchOptions", "BatchSummary", "BatchUsageError", "DatasetCheck",
    "DatasetError", "Executor", "PoolExecutor", "ResultsFileError", "ResultsLockedError", "ResultsTamperedError", "ResultsWriter", "Tally",
    "MAX_SESSIONS_PER_RUNTIME", "PoolRunner", "may_write_transcript",
    "attempt_on_pool", "check_dataset", "in_shard", "iter_dataset", "load_dataset", "parse_shard", "read_results",
    "RUNTIME_CRASHED", "RuntimeCrash", "SharedPlaces", "MergeError", "MergeReport", "merge_results",
    "ControlError", "send_command", "DatasetIndex", "index_dataset",
    "read_transcript", "run_batch", "scan_results", "score_results", "stable_hash", "summarize", "transcript_name",
]
SCALE_NAMES = [
    "ActorSpec", "HostConfig", "HostFailedError", "HostInfo", "PoolHost", "RayExecutor", "RemoteError",
    "ScaleError", "run_batch_ray", "split_spec",
]


def exported() -> list[tuple[str, str, Any]]:
    """(package, name, object) of every name in every ``__all__``."""
    out = []
    for module in [dsh_orchestra, *(importlib.import_module(f"dsh_orchestra.{p}") for p in PACKAGES)]:
        for name in module.__all__:
            out.append((module.__name__, name, getattr(module, name)))
    return out


def test_the_root_exports_the_curated_list() -> None:
    assert sorted(dsh_orchestra.__all__) == sorted(ROOT_NAMES)
    assert len(set(dsh_orchestra.__all__)) == len(dsh_orchestra.__all__)


def test_batch_and_scale_export_what_users_call() -> None:
    assert importlib.import_module("dsh_orchestra.batch").__all__ == sorted(BATCH_NAMES)
    assert importlib.import_module("dsh_orchestra.scale").__all__ == sorted(SCALE_NAMES)


def test_every_exported_name_resolves_and_is_documented() -> None:
    for package, name, value in exported():
        assert value is not None, f"{package}.{name}"
        if isinstance(value, (type, types.FunctionType)):
            assert (value.__doc__ or "").strip(), f"{package}.{name} has no docstring"


def test_exported_objects_carry_their_public_module() -> None:
    """A class or function shows where users import it from (the root for the root's
    exports); never a private module."""
    for package, name, value in exported():
        if not isinstance(value, (type, types.FunctionType)):
            continue
        home = value.__module__
        assert "._" not in home, f"{package}.{name} is {home}"
        if ROOT_EXPORTS.get(name) == package.removeprefix("dsh_orchestra."):  # (sync.open_runtime is not the root's)
            assert home == "dsh_orchestra", f"{package}.{name} is {home}"
        # the public path gives back the very object (pickle and reprs rely on it)
        assert getattr(importlib.import_module(home), value.__qualname__) is value


def test_reprs_and_tracebacks_show_the_public_path() -> None:
    from dsh_orchestra import RuntimeStartError
    from dsh_orchestra.batch import BatchItem
    from dsh_orchestra.scale import RayExecutor

    assert repr(RuntimeStartError) == "<class 'dsh_orchestra.RuntimeStartError'>"
    assert repr(BatchItem) == "<class 'dsh_orchestra.batch.BatchItem'>"
    assert RayExecutor.__module__ == "dsh_orchestra.scale"
    try:
        raise RuntimeStartError("dsh", None, "no runtime")
    except RuntimeStartError as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc))
    assert text.startswith("dsh_orchestra.RuntimeStartError: runtime 'dsh' failed to start: no runtime")


def test_every_exported_class_and_function_pickles_by_its_public_path() -> None:
    for package, name, value in exported():
        if isinstance(value, (type, types.FunctionType)):
            assert pickle.loads(pickle.dumps(value)) is value, f"{package}.{name}"


def test_instances_round_trip_through_pickle() -> None:
    """What crosses to Ray actors and back: attempts with turns, errors with parameters, options."""
    from dsh_orchestra import BatchOptions, BatchUsageError, PoolClosedError, TurnResult
    from dsh_orchestra.batch import Attempt, BatchItem
    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.scale import RemoteError

    with pytest.raises(BatchUsageError) as caught:
        BatchOptions(runtimes=0)
    error = pickle.loads(pickle.dumps(caught.value))
    assert type(error) is BatchUsageError and isinstance(error, ValueError)
    assert (str(error), error.param, error.value) == ("runtimes must be an integer >= 1, not 0", "runtimes", 0)
    with pytest.raises(ValueError) as spec_error:
        RuntimeSpec(dsh_home="/tmp/x", max_tokens=0)
    restored = pickle.loads(pickle.dumps(spec_error.value))
    assert (restored.param, restored.value, str(restored)) == ("max_tokens", 0, str(spec_error.value))
    turn = TurnResult(session_id="s", message_id="m", final_response="hi", finish_reason="stop", error=None,
                      events=[], notifications=[], subagents=[], duration=0.5)
    attempt = Attempt(session_id="s", turn=turn)
    assert pickle.loads(pickle.dumps(attempt)) == attempt
    item = BatchItem(id="a", prompt="hi")
    assert pickle.loads(pickle.dumps(item)) == item
    options = BatchOptions(runtimes=2, retries=0)
    assert pickle.loads(pickle.dumps(options)) == options
    closed = pickle.loads(pickle.dumps(PoolClosedError("the pool closed")))
    assert type(closed) is PoolClosedError and str(closed) == "the pool closed"
    remote = RemoteError("ValueError", "bad", {})
    assert str(pickle.loads(pickle.dumps(remote))) == str(remote)


def test_the_wire_converter_still_structures_renamed_classes() -> None:
    """cattrs resolves annotations of classes whose __module__ is now the public path."""
    from dsh_orchestra.protocol import PromptParams, TextBlock, structure, unstructure

    params = PromptParams(session_id="s", content_blocks=[TextBlock(text="hi")])
    assert PromptParams.__module__ == "dsh_orchestra.protocol"
    assert structure(unstructure(params), PromptParams, method="session/prompt") == params


def test_type_hints_of_exported_classes_resolve() -> None:
    """``typing.get_type_hints`` (hypothesis, cattrs, users) still finds every annotation's names,
    although the module ``__module__`` names is no longer the defining one."""
    for _package, _name, value in exported():
        if isinstance(value, type):
            typing.get_type_hints(value)


def test_each_package_writes_its_all_once() -> None:
    """``__all__`` comes from the imports (``publish``), never a second list of the same names."""
    for package in PACKAGES:
        tree = ast.parse((SOURCE / package / "__init__.py").read_text())
        assigned = [node for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        assert len(assigned) == 1, package
        assert ast.unparse(assigned[0].value) == "_publish(globals())", package


def test_the_root_type_checking_imports_match_the_list() -> None:
    """The root's TYPE_CHECKING imports (for type checkers) name exactly ROOT_EXPORTS."""
    tree = ast.parse((SOURCE / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                for alias in stmt.names:
                    assert alias.asname == alias.name
                    names[alias.name] = stmt.module or ""
    assert names == ROOT_EXPORTS


def test_importing_the_protocol_imports_no_trio() -> None:
    code = "import dsh_orchestra.protocol, pickle, sys; pickle.dumps(dsh_orchestra.protocol.RuntimeStartError); " \
           "print('trio' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr
