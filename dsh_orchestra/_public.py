"""The public API: what the package root re-exports, and each package's ``__all__``.

A package declares its public names once, by importing them into its ``__init__`` with
``import X as X``; ``__all__ = publish(globals())`` lists them and rewrites the ``__module__``
of the classes and functions defined in the package's private modules to the path users
import them from (``dsh_orchestra.batch.BatchOptions``; ``dsh_orchestra.RuntimeStartError``
for what the root re-exports), as trio's ``fixup_module_metadata`` does, so reprs and
tracebacks show that path. Pickle and cattrs keep working: an object is only renamed when the
public path gives back the same object, and attrs classes have their annotations resolved
against their defining module first.
"""

from __future__ import annotations

import __future__
import sys
from types import FunctionType, ModuleType
from typing import Any, MutableMapping

import attrs

ROOT = "dsh_orchestra"

ROOT_EXPORTS: dict[str, str] = {
    # the curated list the package root re-exports, lazily: name -> the package it comes from
    "ApprovalRequest": "approvals", "ApprovalService": "approvals", "AuditLog": "approvals",
    "Decision": "approvals", "DecisionRecord": "approvals", "load_policy": "approvals", "replay": "approvals",
    "BatchOptions": "batch", "BatchSummary": "batch", "BatchUsageError": "batch", "DatasetError": "batch",
    "load_dataset": "batch", "run_batch": "batch",
    "EvalItem": "eval", "EvalResult": "eval", "Score": "eval",
    "GatewayOptions": "gateway",
    "PoolClosedError": "pool", "RuntimePool": "pool", "open_places": "pool", "open_pool": "pool",
    "FrameTooLargeError": "protocol", "JsonRpcResponseError": "protocol", "MethodNotSupportedError": "protocol",
    "OrchestraError": "protocol", "RequestTimeoutError": "protocol", "RuntimeExitedError": "protocol",
    "RuntimeStartError": "protocol", "SdkProtocolError": "protocol", "SubscriberOverflowError": "protocol",
    "TransportClosedError": "protocol",
    "QuestionAnswerError": "questions", "QuestionsRequest": "questions",
    "ResultLine": "results",
    "RuntimeActor": "runtime", "RuntimeSpec": "runtime",
    "CommandResult": "session", "Runtime": "session", "Session": "session", "SubagentResult": "session",
    "TurnGroup": "session", "TurnResult": "session", "open_runtime": "session",
    "Connection": "transport", "Notification": "transport", "Subscription": "transport",
    "CheckpointError": "workflow", "StepContext": "workflow", "StepResult": "workflow", "Workflow": "workflow",
    "WorkflowOptions": "workflow", "WorkflowResult": "workflow", "escalate": "workflow", "load_recipe": "workflow", "open_workflow": "workflow",
    "run_workflow": "workflow",
    "configure_logging": "_logging", "log_context": "_logging", "register_secrets": "_logging",
    "enable_tracing": "_tracing",
}
"""What ``import dsh_orchestra`` offers: name -> the module (under the root) it is imported from."""


def publish(namespace: MutableMapping[str, Any]) -> list[str]:
    """A package's ``__all__``: the names its ``__init__`` imported without a leading underscore
    (modules aside), sorted. Each class or function among them that is defined inside the
    package gets the public ``__module__`` (see the module docstring)."""
    package = namespace["__name__"]
    names = sorted(
        name for name, value in namespace.items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and value is not __future__.annotations
    )
    for name in names:
        fix_module(namespace[name], name, package)
    return names


def public_path(name: str, package: str) -> str:
    """Where users import ``name`` of ``package`` from: the root, when it re-exports it."""
    return ROOT if ROOT_EXPORTS.get(name) == package.removeprefix(ROOT + ".") else package


def fix_module(value: Any, name: str, package: str) -> None:
    """Give ``value`` (exported as ``name`` by ``package``) its public ``__module__``.

    Only classes and functions defined in ``package``'s own modules (or in a shared private
    helper, ``dsh_orchestra._redact`` say, that ``package`` re-exports), exported under their
    own name (so that pickle finds them at ``module.qualname``).
    """
    if not isinstance(value, (type, FunctionType)):
        return
    module = value.__module__
    if not module.startswith((package + ".", ROOT + "._")):
        return
    if getattr(value, "__name__", None) != name or getattr(value, "__qualname__", name) != name:
        return
    if isinstance(value, type):
        _resolve_annotations(value, vars(sys.modules[module]))
    value.__module__ = public_path(name, package)


def _resolve_annotations(cls: type, namespace: dict[str, Any]) -> None:
    """Evaluate ``cls``'s own string annotations in its defining module's ``namespace`` (with
    ``from __future__ import annotations`` they are strings, which ``typing.get_type_hints``,
    cattrs and hypothesis would look up in the module ``__module__`` names). An annotation
    that cannot be evaluated here (a name imported only under TYPE_CHECKING) stays a string."""
    own = cls.__dict__.get("__annotations__")
    if own:
        local = dict(vars(cls))
        resolved = dict(own)
        for key, annotation in own.items():
            if isinstance(annotation, str):
                try:
                    resolved[key] = eval(annotation, namespace, local)  # noqa: S307 (our own annotations)
                except Exception:  # noqa: BLE001 (left as the string it was)
                    pass
        cls.__annotations__ = resolved
    if attrs.has(cls):
        try:
            attrs.resolve_types(cls, globalns=namespace)
        except NameError:
            pass
