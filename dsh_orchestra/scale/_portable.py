"""What crosses from the driver to an actor: the runtime spec without its secrets, and errors.

Owns: splitting a driver's ``RuntimeSpec`` into a secret-free spec, the non-secret settings
(sent as the actor's ``runtime_env`` ``env_vars``: Ray may log them) and the secrets (sent
through the object store: never in a log, never in an actor's creation arguments), and
rebuilding the spec on the actor's node; errors made portable (our errors take several
constructor arguments, which plain pickling of an exception cannot rebuild).

Imports no Ray: the Ray glue lives in ``_ray`` and ``_actor``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

import attrs

from .._params import Param, ParamValueError
from .._scratch import scratch_dir
from ..protocol import OrchestraError, RuntimeStartError
from ..runtime import RuntimeSpec

FORWARDED_PREFIXES = ("DEEPSEEK_", "DSH_")
"""Driver environment variables that a runtime would have inherited on one machine, and that
actors on other nodes get too (when the spec inherits the environment). ``DSH_HOME`` is not
forwarded: each actor has its own (see ``ActorSpec``)."""

API_KEY = "DSH_ORCHESTRA_API_KEY"
"""The key of ``RuntimeSpec.api_key`` in the secrets mapping."""

ACTOR_PLACEHOLDER = "{actor}"
"""In ``dsh_home``: replaced by the actor's slot number on its node (``/scratch/dsh-{actor}``)."""


@attrs.frozen(kw_only=True)
class ActorSpec:
    """A driver's runtime spec as an actor receives it: no secrets, and no environment values.

    ``env_names`` are read from the actor's own environment (the ``runtime_env`` env_vars the
    driver set, or the node's); ``secret_names`` come from the secrets mapping handed over
    through the object store. ``temp_home``: each actor uses a private temporary DSH_HOME
    (removed when it closes) instead of ``spec.dsh_home``.
    """

    spec: RuntimeSpec
    env_names: tuple[str, ...] = ()
    secret_names: tuple[str, ...] = ()
    temp_home: bool = False
    driver_executable: str = ""

    def rebuild(self, secrets: Mapping[str, str], slot: int) -> tuple[RuntimeSpec, tempfile.TemporaryDirectory[str] | None]:
        """The spec to run on this node (and the temporary DSH_HOME it owns, if any).

        Raises:
            OrchestraError: a secret the driver named did not arrive.
        """
        missing = [name for name in self.secret_names if name not in secrets]
        if missing:
            raise OrchestraError(f"the secrets {missing!r} did not reach the actor; the driver must hand them over")
        env = {name: os.environ[name] for name in self.env_names if name in os.environ}
        env.update({name: secrets[name] for name in self.secret_names if name != API_KEY})
        changes: dict[str, Any] = {"env": {**self.spec.env, **env}, "api_key": secrets.get(API_KEY)}
        command = self.spec.command
        if command and command[0] == self.driver_executable and command[1:3] == ("-m", "dsh_orchestra.testing"):
            changes["command"] = (sys.executable, *command[1:])  # the simulator: this node's interpreter
        home: tempfile.TemporaryDirectory[str] | None = None
        if self.temp_home:
            home = scratch_dir("actor")  # swept by the next run on this node if the actor is killed
            changes["dsh_home"] = home.name
        elif self.spec.dsh_home is not None:
            path = Path(str(self.spec.dsh_home).replace(ACTOR_PLACEHOLDER, str(slot)))
            path.mkdir(parents=True, exist_ok=True)
            changes["dsh_home"] = path
        return self.spec.evolve(**changes), home


def split_spec(spec: RuntimeSpec, *, temp_home: bool = False,
               environ: Mapping[str, str] | None = None) -> tuple[ActorSpec, dict[str, str], dict[str, str]]:
    """``(actor spec, settings, secrets)`` for ``spec``.

    ``settings`` go to the actors' ``runtime_env`` env_vars, ``secrets`` through the object
    store. A value is secret when the spec itself counts it as one (``spec.secrets()``: the api
    key, secret-named env values). With ``inherit_env``, the driver's ``DEEPSEEK_*``/``DSH_*``
    variables (``environ``, default ``os.environ``) are forwarded as well (not ``DSH_HOME``).

    Raises:
        ValueError: an in-process spec (``connect=...``): it cannot run in another process.
    """
    if spec.connect is not None:
        raise ParamValueError(
            "an in-process runtime (RuntimeSpec(", Param("connect", spelled="connect=..."), ")) cannot run in a Ray actor; "
            "use a process spec (RuntimeSpec.simulator(...), the bundled dsh or a command)"
        )
    environ = os.environ if environ is None else environ
    env = dict(spec.env)
    if spec.inherit_env:
        for name, value in environ.items():
            if name.startswith(FORWARDED_PREFIXES) and name != "DSH_HOME" and name not in env:
                env[name] = value
    # the spec's own rule decides what is secret, applied to the forwarded variables as well
    secret_values = set(spec.secrets()) | set(spec.evolve(env=env, inherit_env=False).secrets())
    settings = {k: v for k, v in env.items() if v not in secret_values}
    secrets = {k: v for k, v in env.items() if v in secret_values}
    if spec.api_key:
        secrets[API_KEY] = spec.api_key
    portable = spec.evolve(env={}, api_key=None)
    actor_spec = ActorSpec(
        spec=portable, env_names=tuple(sorted(settings)), secret_names=tuple(sorted(secrets)),
        temp_home=temp_home, driver_executable=sys.executable,
    )
    return actor_spec, settings, secrets


# ---- errors ------------------------------------------------------------------------------


class RemoteError(OrchestraError):
    """An error raised inside an actor, carried back by name, message and fields (picklable).

    ``local()`` rebuilds the original type where it is ours and can be rebuilt exactly
    (``RuntimeStartError``); otherwise the RemoteError stands for it.
    """

    def __init__(self, type_name: str, message: str, fields: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.fields = dict(fields or {})

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteError, (self.type_name, self.message, self.fields))

    @classmethod
    def of(cls, exc: BaseException) -> RemoteError:
        """Capture ``exc`` (an ExceptionGroup by its first leaf)."""
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        if isinstance(exc, RemoteError):
            return exc
        fields: dict[str, Any] = {}
        if isinstance(exc, RuntimeStartError):
            fields = {"command": exc.command, "profile": exc.profile, "reason": exc.reason, "stderr_tail": exc.stderr_tail}
        return cls(type(exc).__name__, str(exc), fields)

    def local(self) -> OrchestraError:
        """The error to raise on the driver."""
        if self.type_name == "RuntimeStartError" and self.fields:
            return RuntimeStartError(**self.fields)
        return self
