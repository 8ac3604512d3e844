"""RuntimeSpec: an immutable description of how to launch and greet one runtime.

Owns: launch argv, environment, working directories, the handshake route and lifecycle
bounds. Must not know about sessions, pools or workflows. Secrets never appear in reprs.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Mapping

import attrs

from .._params import Param, ParamTypeError, ParamValueError, integer, non_empty, one_of, positive
from .._redact import MIN_INHERITED_SECRET, SECRET_NAME, encoded_forms, looks_random, redact
from ..protocol import ClientCapabilities, InitializeParams
from ._sandbox import SANDBOX_MODES, sandbox_paths

Connector = Callable[[], AsyncContextManager[Any]]
"""Opens an in-process stream to a runtime (for example the simulator over memory streams)."""

APPROVAL_RELAY_MODES = ("auto", "on", "off")
"""``approval_relay`` values: ``auto`` relays when a policy or an answerer is given and the
runtime loads ``--patch`` files (the bundled dsh); ``on`` insists (an error where it cannot
work); ``off`` never relays."""

DEFAULT_PROVIDER = "deepseek-official"
DEFAULT_MODEL = "deepseek-v4-flash"
_SECRET_NAME = SECRET_NAME
_MIN_INHERITED_SECRET = MIN_INHERITED_SECRET
_MIN_SECRET = 4


def _redacted_env(env: Mapping[str, str]) -> str:
    shown = {k: ("***" if _SECRET_NAME.search(k) else v) for k, v in env.items()}
    return repr(shown)


_NON_EMPTY = non_empty()
_POSITIVE_INT = integer(1, "a positive integer")
_AT_LEAST_ONE = integer(1)
_SECONDS = positive("a positive number of seconds")


def _path_or_none(value: Any) -> Path | None:
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():  # Path("") would be the current directory
        raise ParamValueError(Param("dsh_home", value, spelled="dsh_home"), f" must be a directory path, not {value!r}")
    return _absolute(value)


def _absolute(value: Any) -> Path:
    """``value`` made absolute against the current directory now, with ``..`` folded."""
    return Path(os.path.abspath(os.fspath(value)))


def _absolute_or_none(value: Any) -> Path | None:
    return None if value is None else _absolute(value)


def _env(value: Any) -> dict[str, str]:
    env = dict(value)
    for key, item in env.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ParamTypeError(Param("env", spelled="env"), f" must map strings to strings; {key!r} maps to {type(item).__name__}")
    return env


def _arguments(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ParamTypeError(Param(name, spelled=name), f" must be a sequence of arguments, not the string {value!r}; split it first")
    return tuple(str(v) for v in value)


def _command(value: Any) -> tuple[str, ...] | None:
    return None if value is None else _arguments("command", value)


def _patches(value: Any) -> tuple[str, ...]:
    return _arguments("patches", value)


COMPILE_CACHE_VARIABLE = "NODE_COMPILE_CACHE"
COMPILE_CACHE_MODES = ("auto", "on", "off")
"""``RuntimeSpec.compile_cache`` values: ``auto`` (default) gives a dsh the compile cache in a
DSH_HOME a dsh started in before (the first start on a new home would pay for writing it at its
exit and gain nothing), ``on`` always, ``off`` never."""


def compile_cache_dir(dsh_home: str | os.PathLike[str]) -> Path:
    """Where a dsh keeps V8's compile cache with ``RuntimeSpec.compile_cache``: inside its
    DSH_HOME's ``.cache`` (writable under the sandbox, shared only by runtimes of that home)."""
    return Path(os.path.abspath(os.fspath(dsh_home))) / ".cache" / "node-compile-cache"


def bundled_dsh_command() -> tuple[str, ...]:
    """The argv prefix of the bundled ``dsh`` from ``deepseek-harness-runtime-bin``.

    Raises:
        FileNotFoundError: the runtime package is not installed or has no executable here.
    """
    try:
        from deepseek_harness_runtime import resolve_bundled_launch_args  # type: ignore[import-untyped]
    except ImportError as exc:
        raise FileNotFoundError(
            "the bundled dsh runtime is not installed: pip install "
            "'deepseek-harness-runtime-bin==0.2.1rc2' (or give RuntimeSpec a command)"
        ) from exc
    return tuple(resolve_bundled_launch_args())


@attrs.frozen(kw_only=True)
class RuntimeSpec:
    """How to launch and greet one runtime.

    Exactly one of three launch modes: ``command=None`` and ``connect=None`` launch the
    bundled ``dsh``; ``command`` is any argv that speaks the protocol on stdio (``--profile``
    and ``--patch`` are appended only for the bundled dsh or when ``append_profile``);
    ``connect`` opens an in-process stream instead of a process.

    ``dsh_home`` is required for processes: there is never a fallback to ``~/.dsh``.
    ``cwd`` (the workspace sent in ``initialize``) and ``process_cwd`` are made absolute here.
    """

    command: tuple[str, ...] | None = attrs.field(default=None, converter=_command)
    connect: Connector | None = attrs.field(default=None, repr=False)
    profile: str = attrs.field(default="sdk", validator=_NON_EMPTY)
    patches: tuple[str, ...] = attrs.field(default=(), converter=_patches)
    append_profile: bool | None = None
    dsh_home: Path | None = attrs.field(default=None, converter=_path_or_none)
    cwd: Path = attrs.field(factory=Path.cwd, converter=_absolute)
    process_cwd: Path | None = attrs.field(default=None, converter=_absolute_or_none)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=_env, repr=_redacted_env)
    inherit_env: bool = True
    base_url: str | None = attrs.field(default=None, validator=attrs.validators.optional(_NON_EMPTY))
    api_key: str | None = attrs.field(default=None, repr=lambda v: "None" if v is None else "'***'")
    provider: str = attrs.field(default=DEFAULT_PROVIDER, validator=_NON_EMPTY)
    model: str = attrs.field(default=DEFAULT_MODEL, validator=_NON_EMPTY)
    reasoning_effort: str | None = attrs.field(default=None, validator=attrs.validators.optional(_NON_EMPTY))
    max_tokens: int | None = attrs.field(default=None, validator=attrs.validators.optional(_POSITIVE_INT))
    handshake_timeout: float = attrs.field(default=30.0, validator=_SECONDS)
    handshake_attempts: int = attrs.field(default=1, validator=_AT_LEAST_ONE)
    shutdown_timeout: float = attrs.field(default=1.0, validator=_SECONDS)
    eof_grace: float = attrs.field(default=2.0, validator=_SECONDS)
    terminate_grace: float = attrs.field(default=2.0, validator=_SECONDS)
    exit_wait: float = attrs.field(default=5.0, validator=_SECONDS)
    stderr_tail_lines: int = 200
    name: str | None = None
    approval_relay: str = "auto"
    """Answer the real runtime's internal approval and question chains with the ``approvals``
    policy and the ``answerer`` of ``open_runtime`` (a ``--patch`` plugin and a private Unix
    socket; docs/approvals.md): ``auto`` (default), ``on`` or ``off`` (APPROVAL_RELAY_MODES)."""
    relay_approvals: bool | None = attrs.field(default=None, repr=False)
    """Deprecated alias: ``True`` is ``approval_relay="on"``, ``False`` is ``"off"`` (warns)."""
    sandbox: str = attrs.field(default="auto", validator=one_of(*SANDBOX_MODES))
    """Run the process under bubblewrap (docs/runtime.md#sandbox): ``auto`` (default: the bundled
    dsh, when bubblewrap works here; a one-line warning when it does not), ``bwrap`` (any process
    runtime; RuntimeStartError where bubblewrap does not work) or ``none`` (SANDBOX_MODES)."""
    sandbox_writable: tuple[Path, ...] = attrs.field(default=(), converter=sandbox_paths)
    """Inside the sandbox, writable besides ``cwd`` and ``dsh_home`` (a batch's workspace root)."""
    sandbox_readable: tuple[Path, ...] = attrs.field(default=(), converter=sandbox_paths)
    """Inside the sandbox, readable where they would be hidden (the approval relay's directory)."""
    sandbox_hidden: tuple[Path, ...] = attrs.field(default=(), converter=sandbox_paths)
    """Inside the sandbox, covered by an entry nobody may open (a batch's outputs)."""
    compile_cache: str = attrs.field(default="auto", validator=one_of(*COMPILE_CACHE_MODES))
    """A dsh (``loads_patches``) keeps V8's compiled code in ``<dsh_home>/.cache/node-compile-cache``
    (``NODE_COMPILE_CACHE``, unless ``env`` sets it; docs/runtime.md#compile-cache): ``auto``
    (default) in a DSH_HOME a dsh started in before, ``on`` always, ``off`` never (COMPILE_CACHE_MODES)."""

    def __attrs_post_init__(self) -> None:
        if self.command is not None and self.connect is not None:
            raise ParamValueError("give RuntimeSpec either ", Param("command", spelled="command"), " or ",
                                  Param("connect", spelled="connect"), ", not both")
        if self.command is not None and not self.command:
            raise ParamValueError(Param("command", self.command, spelled="command"), " must not be empty")
        if self.connect is None and self.dsh_home is None:
            raise ParamValueError(
                "RuntimeSpec needs an explicit ", Param("dsh_home", spelled="dsh_home"), " (the runtime's DSH_HOME); "
                "dsh_orchestra never falls back to ~/.dsh: pass RuntimeSpec(dsh_home=<a directory for this runtime>)"
            )
        if self.relay_approvals is not None:
            warnings.warn(
                "RuntimeSpec(relay_approvals=...) is deprecated: use approval_relay='on' | 'off' | 'auto'",
                DeprecationWarning, stacklevel=3,
            )
            object.__setattr__(self, "approval_relay", "on" if self.relay_approvals else "off")
            object.__setattr__(self, "relay_approvals", None)
        one_of(*APPROVAL_RELAY_MODES).check("approval_relay", self.approval_relay)
        if self.approval_relay == "on" and not self.loads_patches:
            raise ParamValueError(
                Param("approval_relay", "on"), " needs a runtime that loads --patch files: the bundled dsh "
                "(command=None), or a dsh command with append_profile=True"
            )

    def __repr__(self) -> str:
        # Hand-written (attrs keeps it) so that a secret inside argv is redacted as well.
        parts = []
        for field in attrs.fields(type(self)):
            if field.repr is False:
                continue
            value = getattr(self, field.name)
            parts.append(f"{field.name}={field.repr(value) if callable(field.repr) else repr(value)}")
        return redact(f"RuntimeSpec({', '.join(parts)})", self.secrets())

    # ---- constructors ------------------------------------------------------------------

    @classmethod
    def simulator(cls, *, script: str | os.PathLike[str] | None = None, **kwargs: Any) -> RuntimeSpec:
        """Run the simulated runtime as a process (``python -m dsh_orchestra.testing sim``)."""
        command = [sys.executable, "-m", "dsh_orchestra.testing", "sim"]
        if script is not None:
            command += ["--script", str(Path(script).absolute())]
        kwargs.setdefault("name", "sim")
        return cls(command=tuple(command), **kwargs)

    # ---- derived values ----------------------------------------------------------------

    @property
    def loads_patches(self) -> bool:
        """True when the launched runtime gets ``--profile`` and ``--patch`` (a dsh)."""
        return self.connect is None and (self.command is None or bool(self.append_profile))

    @property
    def sandboxed(self) -> bool:
        """Whether ``sandbox`` asks for bubblewrap for this runtime (``bwrap``; ``auto`` for the
        bundled dsh); whether it works here is found out as the process starts."""
        if self.connect is not None or self.sandbox == "none":
            return False
        return self.sandbox == "bwrap" or self.command is None

    @property
    def unpatched_dsh(self) -> bool:
        """True when ``command`` runs a dsh (by its program's name: ``dsh``, or the bundled
        ``deepseek-harness-sdk-runtime-*`` binary) that gets no ``--patch`` files."""
        if self.command is None or self.connect is not None or self.append_profile:
            return False
        program = Path(self.command[0]).name
        return program == "dsh" or program.startswith("deepseek-harness-sdk-runtime")

    @property
    def uses_compile_cache(self) -> bool:
        """Whether the child gets ``NODE_COMPILE_CACHE`` (``compile_cache``; for ``auto``, asked of
        the file system now: the home holds ``profiles/``, which a dsh makes at its first start)."""
        if self.compile_cache == "off" or not self.loads_patches or COMPILE_CACHE_VARIABLE in self.env:
            return False
        if self.compile_cache == "on":
            return True
        assert self.dsh_home is not None  # loads_patches: a process, whose spec has a home
        return os.path.isdir(self.dsh_home / "profiles") or os.path.isdir(compile_cache_dir(self.dsh_home))

    def relays(self, *, approvals: bool, answerer: bool) -> bool:
        """Whether the approval relay runs, given whether a policy / an answerer is configured."""
        if self.approval_relay == "off" or not (approvals or answerer):
            return False
        return self.approval_relay == "on" or self.loads_patches

    @property
    def display_name(self) -> str:
        """A short name for logs and errors (never includes secrets)."""
        if self.name:
            return self.name
        if self.connect is not None:
            return "in-process runtime"
        if self.command is None:
            return "dsh"
        words = [Path(self.command[0]).name, *self.command[1:4]]
        return redact(" ".join(words), self.secrets())  # an argv may carry a key

    def argv(self) -> list[str]:
        """The full argv to launch (bundled dsh resolved here)."""
        if self.connect is not None:
            raise ParamValueError("an in-process runtime (", Param("connect", spelled="connect="), ") has no argv")
        bundled = self.command is None
        argv = list(bundled_dsh_command() if bundled else self.command or ())
        if bundled or self.append_profile:
            argv += ["--profile", self.profile]
            for patch in self.patches:
                argv += ["--patch", str(Path(patch).absolute())]
        return argv

    def process_env(self) -> dict[str, str]:
        """The child's environment: ours (if inherited), overrides, DSH_HOME and the endpoint."""
        if self.dsh_home is None:
            raise ParamValueError(
                f"runtime {self.display_name!r} needs an explicit ", Param("dsh_home", spelled="dsh_home"),
                " (DSH_HOME); dsh_orchestra never falls back to ~/.dsh: pass RuntimeSpec(dsh_home=...)",
            )
        env = dict(os.environ) if self.inherit_env else {}
        env.update(self.env)
        env["DSH_HOME"] = str(Path(self.dsh_home).absolute())
        if self.uses_compile_cache:
            env[COMPILE_CACHE_VARIABLE] = str(compile_cache_dir(self.dsh_home))
        if self.base_url is not None:
            env["DEEPSEEK_BASE_URL"] = self.base_url
        if self.api_key is not None:
            env["DEEPSEEK_API_KEY"] = self.api_key
        return env

    def secrets(self) -> list[str]:
        """Values that must never be logged: the api key, the values of secret-named variables
        (KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, AUTH, PAT) and random-looking ones
        (``looks_random``), each with its base64 forms.

        Inherited variables count too (the child sees them), when they are at least
        ``_MIN_INHERITED_SECRET`` characters long, so a ``...AUTH...=1`` does not blank every "1".
        Values shorter than ``_MIN_SECRET`` are no credentials (a placeholder key ``"k"`` would
        otherwise turn ``deepseek`` into ``deepsee***`` in every message).
        """
        values = [v for k, v in self.env.items() if (_SECRET_NAME.search(k) and v) or looks_random(v)]
        if self.inherit_env:
            values += [
                v for k, v in os.environ.items()
                if ((_SECRET_NAME.search(k) and len(v) >= _MIN_INHERITED_SECRET) or looks_random(v)) and k not in self.env
            ]
        if self.api_key:
            values.append(self.api_key)
        # with their base64 forms; longest first, so that no part of a longer secret is left behind
        return sorted(set(encoded_forms(v for v in values if len(v) >= _MIN_SECRET)), key=len, reverse=True)

    def initialize_params(self, *, approval_requests: bool = False, user_questions: bool = False) -> InitializeParams:
        """The ``initialize`` params; the feature flags are sent only when enabled."""
        return InitializeParams(
            cwd=str(self.cwd),
            provider=self.provider,
            model=self.model,
            reasoning_effort=self.reasoning_effort,
            max_tokens=self.max_tokens,
            approval_requests=True if approval_requests else None,
            capabilities=ClientCapabilities(user_questions=True) if user_questions else None,
        )

    def evolve(self, **changes: Any) -> RuntimeSpec:
        """A copy with ``changes`` applied (validated again)."""
        return attrs.evolve(self, **changes)
