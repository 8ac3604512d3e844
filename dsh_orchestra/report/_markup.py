"""Escaped HTML/SVG building: every string that is not already Markup is escaped.

The report's server-side parts (summary tables, charts, the workflow graph) are built only
with ``tag``, so text taken from results can never become markup. ``embed_json`` makes a JSON
document safe inside ``<script type="application/json">``.
"""

from __future__ import annotations

import html
from typing import Any, Iterable

import orjson


class Markup(str):
    """A string that is already safe markup (built by ``tag`` or written by us)."""


def escape(value: Any) -> Markup:
    """``value`` as text: ``& < > " '`` escaped (Markup passes through)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def _children(children: Iterable[Any]) -> str:
    parts = []
    for child in children:
        if child is None or child is False:
            continue
        if isinstance(child, (list, tuple)):
            parts.append(_children(child))
        else:
            parts.append(escape(child))
    return "".join(parts)


def tag(name: str, attributes: dict[str, Any] | None = None, *children: Any) -> Markup:
    """``<name attr="value">children</name>``; None/False attributes and children are left out,
    True attributes are written bare, lists of children are flattened."""
    attrs = ""
    for key, value in (attributes or {}).items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        attrs += f" {key}" if value is True else f' {key}="{escape(value)}"'
    return Markup(f"<{name}{attrs}>{_children(children)}</{name}>")


def join(parts: Iterable[Any]) -> Markup:
    """Concatenate, escaping what is not Markup."""
    return Markup(_children(parts))


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
