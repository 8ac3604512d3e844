"""A local web app over batch results: ``dsh-orchestra view`` (live while a batch writes).

Sits on top of ``report`` (it reuses the conversation and comparison builders) and ``batch``
(its files, its control socket). The web stack (Starlette on Hypercorn's trio worker) is the
``view`` extra, imported only when a server starts.
"""

from .._public import publish as _publish
from ._index import ResultsIndex as ResultsIndex
from ._runs import ViewInputError as ViewInputError
from ._serve import (
    DEFAULT_HOST as DEFAULT_HOST, DEFAULT_PORT as DEFAULT_PORT, ViewServeError as ViewServeError, bind as bind,
    check_paths as check_paths, serve as serve,
)

__all__ = _publish(globals())
