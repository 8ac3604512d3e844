"""The ``dsh-orchestra`` command: thin, it only parses arguments and calls the layers."""

from ._main import main as main

__all__ = ["main"]
