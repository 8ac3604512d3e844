"""Result lines: the typed record of one finished attempt (``ResultLine``) and the one reader of
results files (``read_results``), shared by batch, ``score``, ``compare`` and ``report``.

Pure (no trio); ``read_results`` reads one file line by line. docs/batch.md has the contract.
"""

from .._public import publish as _publish
from ._line import (
    CONVERTER as CONVERTER,
    ApprovalRecord as ApprovalRecord,
    QuestionRecord as QuestionRecord,
    ResultError as ResultError,
    ResultLine as ResultLine,
    ScoreRecord as ScoreRecord,
    SubagentRecord as SubagentRecord,
    TallyLine as TallyLine,
    score_value as score_value,
    Usage as Usage,
)
from ._read import (
    ResultStream as ResultStream,
    ResultsFileError as ResultsFileError,
    read_results as read_results,
    result_problem as result_problem,
)
from ._write import replaced_atomically as replaced_atomically

__all__ = _publish(globals())
