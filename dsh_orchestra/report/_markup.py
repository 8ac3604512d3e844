"""Escaped HTML/SVG building: every string that is not already Markup is escaped.

``Markup`` and ``escape`` are markupsafe's: a ``Markup`` stays safe when a plain string is
added to it or formatted into it (the string is escaped), where a ``str`` subclass of our own
lost the marker. The report's server-side parts (summary tables, charts, the workflow graph)
are built only with ``tag``, so text taken from results can never become markup.
``embed_json`` makes a JSON document safe inside ``<script type="application/json">``.
"""

from __future__ import annotations

from typing import Any, Iterable

import orjson
from markupsafe import Markup, escape

__all__ = ["Markup", "embed_json", "escape", "join", "tag"]


def _children(children: Iterable[Any]) -> Markup:
    parts = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, (list, tuple)):
            parts.append(_children(child))
        else:
            parts.append(escape(child))
    return Markup("").join(parts)


def tag(name: str, attributes: dict[str, Any] | None = None, *children: Any) -> Markup:
    """``<name attr="value">children</name>``; None/False attributes and children are left out,
    True attributes are written bare, lists of children are flattened."""
    attrs = Markup("")
    for key, value in (attributes or {}).items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        attrs += Markup(" {}").format(key) if value is True else Markup(' {}="{}"').format(key, value)
    return Markup("<{}{}>{}</{}>").format(name, attrs, _children(children), name)


def join(parts: Iterable[Any]) -> Markup:
    """Concatenate, escaping what is not Markup."""
    return _children(parts)


_SCRIPT_ESCAPES = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def embed_json(value: Any) -> Markup:
    """JSON text that cannot end or confuse a ``<script>`` element.

    ``<`` ``>`` ``&`` and U+2028/2029 only occur inside JSON strings, where their ``\\uXXXX``
    escapes mean the same: ``</script>``, ``<!--`` and ``]]>`` cannot appear.
    """
    return Markup(orjson.dumps(value, default=str).decode("utf-8").translate(_SCRIPT_ESCAPES))
