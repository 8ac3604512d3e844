"""The golden batch (issue 24): result lines, summaries, ``score``, ``compare`` and a report's
data written today are byte-identical to those checked in (tests/results/golden/, written
before the result line became typed), but for versions, times and session ids."""

from __future__ import annotations


import pytest

from golden_support import GOLDEN, produce

pytestmark = pytest.mark.xdist_group("golden")


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return produce(tmp_path_factory.mktemp("golden"))


def test_every_golden_file_is_produced(produced: dict[str, bytes]) -> None:
    assert sorted(produced) == sorted(p.name for p in GOLDEN.iterdir())


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir()))
def test_byte_identical(produced: dict[str, bytes], name: str) -> None:
    assert produced[name] == (GOLDEN / name).read_bytes(), name
