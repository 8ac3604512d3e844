"""Fixtures of the observability tests: logging and tracing state restored after each test."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from dsh_orchestra import _logging, _tracing


@pytest.fixture(autouse=True)
def clean_observability() -> Iterator[None]:
    """No handler, level, secret or tracing switch leaks from one test into the next."""
    yield
    _logging.unconfigure_logging()
    _logging.forget_secrets()
    _tracing.enable_tracing(False)
    _tracing._enabled = None
    logging.getLogger("dsh_orchestra").setLevel(logging.NOTSET)
