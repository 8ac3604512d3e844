"""Errors that name the caller's parameters, spelled for whoever called.

The library speaks Python: ``str(error)`` names parameters as keyword arguments (``out=``,
``resume=True``, ``policy='rules.toml'``). The CLI speaks flags: it renders the same error
with its own table of flag names (``cli/_errors.py``), so no string outside ``cli/`` names a
flag. An error keeps what it names as attributes: ``.param`` (the first parameter named),
``.value`` (its value, when given) and ``.params`` (every ``Param`` of the message).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import attrs

_UNSET: Any = object()


@attrs.frozen
class Param:
    """A parameter named in a message: ``name``, and its ``value``.

    Without ``spelled`` the message shows the value: ``name='value'`` in Python, ``--flag
    'value'`` in the CLI (or ``name=`` / ``--flag`` when there is no value). With ``spelled``
    Python says that (``resume=True``, or ``runtimes`` as the subject of a sentence) and the
    CLI the bare flag; the value is then only kept as the error's attribute.
    """

    name: str
    value: Any = _UNSET
    spelled: str | None = None

    @property
    def has_value(self) -> bool:
        return self.value is not _UNSET

    @property
    def shows_value(self) -> bool:
        return self.spelled is None and self.has_value

    def python(self) -> str:
        """``spelled``, else ``name=value`` (value as repr), else ``name=``."""
        if self.spelled is not None:
            return self.spelled
        return f"{self.name}={self.value!r}" if self.has_value else f"{self.name}="


Spelling = Callable[[Param], str]


class ParamError(Exception):
    """An error whose message is made of text and ``Param`` parts (see the module docstring)."""

    def __init__(self, *parts: str | Param) -> None:
        self.parts = parts
        self.params = tuple(part for part in parts if isinstance(part, Param))
        first = self.params[0] if self.params else None
        self.param: str | None = first.name if first is not None else None
        self.value: Any = first.value if first is not None and first.has_value else None
        super().__init__(self.render(Param.python))

    def render(self, spell: Spelling) -> str:
        """The message with every parameter spelled by ``spell``."""
        return "".join(part if isinstance(part, str) else spell(part) for part in self.parts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.parts))


def _rebuild(cls: type[ParamError], parts: tuple[str | Param, ...]) -> ParamError:
    error = cls.__new__(cls)
    ParamError.__init__(error, *parts)
    return error


class ParamValueError(ParamError, ValueError):
    """A bad argument value, said with the parameter's name (a ValueError)."""


class ParamTypeError(ParamError, TypeError):
    """An argument of the wrong type, said with the parameter's name (a TypeError)."""


def rewrap(error: type[ParamError], exc: BaseException) -> ParamError:
    """``exc`` as an ``error``, keeping its ``Param`` parts (a plain exception: its text)."""
    return error(*exc.parts) if isinstance(exc, ParamError) else error(str(exc))


@attrs.frozen
class Check:
    """A value check that names the parameter: an attrs validator, or ``check(name, value)``.

    A value for which ``test`` is false raises ``error`` (a ``ParamValueError`` unless given):
    ``<name> must be <expected>, not <value>``.
    """

    test: Callable[[Any], bool]
    expected: str
    error: type[ParamError] = ParamValueError

    def __call__(self, instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        self.check(attribute.name, value)

    def check(self, name: str, value: Any) -> None:
        """Raise ``error`` naming ``name`` unless ``value`` passes."""
        if not self.test(value):
            raise self.error(Param(name, value, spelled=name), f" must be {self.expected}, not {value!r}")

    def raising(self, error: type[ParamError]) -> Check:
        """The same check raising ``error``."""
        return attrs.evolve(self, error=error)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(minimum: int, expected: str | None = None) -> Check:
    """An ``int`` (not a bool) >= ``minimum``."""
    return Check(lambda v: _is_int(v) and v >= minimum, expected or f"an integer >= {minimum}")


def positive(expected: str = "a positive number", *, finite: bool = False) -> Check:
    """A number (not a bool) > 0 (and finite, when ``finite``)."""
    return Check(lambda v: _is_number(v) and v > 0 and (not finite or math.isfinite(v)), expected)


def non_negative(expected: str = "a finite number >= 0") -> Check:
    """A finite number (not a bool) >= 0."""
    return Check(lambda v: _is_number(v) and math.isfinite(v) and v >= 0, expected)


def non_empty(expected: str = "a non-empty string") -> Check:
    """A string with something but whitespace in it."""
    return Check(lambda v: isinstance(v, str) and bool(v.strip()), expected)


def one_of(*choices: str) -> Check:
    """One of ``choices``."""
    return Check(lambda v: v in choices, "one of " + ", ".join(repr(c) for c in choices))
