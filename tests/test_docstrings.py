"""Every public name has a docstring: each public package, each name its ``__all__`` exports
(classes, functions), and each public method and property of an exported class (inherited
docstrings count, as ``inspect.getdoc`` finds them). The API reference (mkdocs.yml, built by
``.ci/run`` with ``mkdocs build --strict``) is generated from these docstrings, one page per
public package."""

from __future__ import annotations

import importlib
import inspect
import re
import types
from pathlib import Path

import dsh_orchestra
from test_public_api import PACKAGES

ROOT = Path(dsh_orchestra.__file__).resolve().parents[1]


def undocumented() -> list[str]:
    missing: list[str] = []
    seen: set[int] = set()
    for module in [dsh_orchestra, *(importlib.import_module(f"dsh_orchestra.{p}") for p in PACKAGES)]:
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, (type, types.FunctionType)) and not (inspect.getdoc(value) or "").strip():
                missing.append(f"{module.__name__}.{name}")
            if not isinstance(value, type) or id(value) in seen:
                continue
            seen.add(id(value))
            for attribute, member in vars(value).items():
                if attribute.startswith("_") or not isinstance(member, (types.FunctionType, property, classmethod, staticmethod)):
                    continue
                if not (inspect.getdoc(getattr(value, attribute)) or "").strip():
                    missing.append(f"{module.__name__}.{name}.{attribute}")
    return missing


def test_every_public_name_has_a_docstring() -> None:
    assert undocumented() == []


def test_the_check_catches_a_missing_docstring(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from dsh_orchestra import sync

    def bare(self: object) -> None:
        pass

    monkeypatch.setattr(sync.Runtime, "bare", bare, raising=False)
    assert undocumented() == ["dsh_orchestra.sync.Runtime.bare"]


def test_the_api_reference_has_a_page_per_public_package() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = dict(re.findall(r"^\s+- (dsh_orchestra\.[a-z_]+): (reference/[a-z_]+\.md)$", config, re.M))
    assert sorted(pages) == sorted(f"dsh_orchestra.{p}" for p in PACKAGES if p not in ("cli",))
    for package, page in pages.items():
        assert (ROOT / "docs" / page).read_text(encoding="utf-8").strip().endswith(f"::: {package}"), page
