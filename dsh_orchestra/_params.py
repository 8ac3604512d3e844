"""Errors that name the caller's parameters, spelled for whoever called.

The library speaks Python: ``str(error)`` names parameters as keyword arguments (``out=``,
``resume=True``, ``policy='rules.toml'``). The CLI speaks flags: it renders the same error
with its own table of flag names (``cli/_errors.py``), so no string outside ``cli/`` names a
flag. An error keeps what it names as attributes: ``.param`` (the first parameter named),
``.value`` (its value, when given) and ``.params`` (every ``Param`` of the message).
"""

from __future__ import annotations

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
