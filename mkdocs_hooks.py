"""MkDocs hook: each API reference page documents exactly its package's ``__all__``.

A page holds ``::: dsh_orchestra.PACKAGE``; the packages write ``__all__`` once, computed from
their imports (``publish``), which a static reader cannot evaluate, so this hook imports the
package and lists its ``__all__`` as the page's members (no second list to keep in step).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

DIRECTIVE = re.compile(r"^::: (dsh_orchestra(?:\.[a-z_]+)*)[ \t]*$", re.M)


INHERITED = {"dsh_orchestra.sync", "dsh_orchestra.aio"}
"""Pages whose classes get their members from a private base (``dsh_orchestra._embedding``'s
handles, which have no page of their own): they show inherited members."""


def members_directive(module_name: str) -> str:
    """The mkdocstrings directive for ``module_name`` with its ``__all__`` as the members."""
    module = importlib.import_module(module_name)
    names = [name for name in module.__all__ if not name.startswith("_")]
    listed = "".join(f"        - {name}\n" for name in names)
    extra = "      inherited_members: true\n" if module_name in INHERITED else ""
    return f"::: {module_name}\n    options:\n{extra}      members:\n{listed}"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Expand every bare ``::: dsh_orchestra...`` directive of a page."""
    return DIRECTIVE.sub(lambda match: members_directive(match.group(1)), markdown)
