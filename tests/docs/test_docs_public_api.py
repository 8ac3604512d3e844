"""Docs and recipes use only public names; docs/runtime.md's feature table names tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

from docs_blocks import ROOT, documents

# dsh_orchestra.<anything>._<private>: a module (or name) whose path has a leading underscore part
_PRIVATE = re.compile(r"\bdsh_orchestra(?:\.[A-Za-z0-9]+)*\.(_[A-Za-z][A-Za-z0-9_]*)")


def sources() -> list[Path]:
    files = [*documents(), *sorted((ROOT / "docs").rglob("*.py")), *sorted((ROOT / "recipes").rglob("*.py"))]
    files += sorted((ROOT / "recipes").rglob("*.md"))
    return [f for f in files if "__pycache__" not in f.parts]


def test_no_private_module_is_imported_or_named_in_docs_and_recipes() -> None:
    found = []
    for path in sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _PRIVATE.finditer(line):
                if match.group(1) != "__version__":
                    found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    assert not found, "use the public names (the package's __init__ re-exports them):\n" + "\n".join(found)


def test_the_private_name_check_catches_what_it_must() -> None:
    for text in ("from dsh_orchestra.testing._fake_model import open_fake_model", "import dsh_orchestra.cli._run",
                 "`dsh_orchestra.batch._transcripts.read_transcript(path)`", "dsh_orchestra._logging.register_secrets"):
        assert _PRIVATE.search(text), text
    for text in ("from dsh_orchestra.testing import open_fake_model", "dsh_orchestra.cli.load_recipe"):
        assert not _PRIVATE.search(text), text


_TEST_REF = re.compile(r"`([a-z_/]+\.py)(?:::([A-Za-z0-9_]+))?`")


def test_every_row_of_the_runtime_feature_table_names_existing_tests() -> None:
    text = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8")
    section = text[text.index("feature by feature"):]
    section = section[: section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| feature") and "---" not in line]
    assert len(rows) >= 15
    for row in rows:
        tested_by = row.rstrip(" |").rsplit(" | ", 1)[-1]
        refs = _TEST_REF.findall(tested_by)
        assert refs, f"row without a test: {row}"
        current = None
        for file, name in refs:
            path = ROOT / "tests" / file
            assert path.is_file(), f"{file} (row {row[:60]!r}) does not exist"
            current = path.read_text(encoding="utf-8")
            if name:
                assert re.search(rf"^(async )?def {name}\(", current, re.M), f"{file}::{name} does not exist"
        # "::name" alone continues the previous file
        for name in re.findall(r"`::([A-Za-z0-9_]+)`", tested_by):
            assert current is not None and re.search(rf"^(async )?def {name}\(", current, re.M) or any(
                re.search(rf"^(async )?def {name}\(", (ROOT / "tests" / f).read_text(encoding="utf-8"), re.M)
                for f, _ in refs), f"::{name} in row {row[:60]!r} does not exist"
