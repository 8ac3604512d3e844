"""User questions: answerer protocol, built-in answerers, validation, QuestionService.

Imports only the protocol layer.
"""

from .._public import publish as _publish
from ._answerers import (
    DISMISS as DISMISS,
    Answerer as Answerer,
    QuestionAnswerError as QuestionAnswerError,
    QuestionRecord as QuestionRecord,
    QuestionService as QuestionService,
    QuestionsRequest as QuestionsRequest,
    answerer_name as answerer_name,
    ask_terminal as ask_terminal,
    by_rule as by_rule,
    first_option as first_option,
    validate_answers as validate_answers,
)

from ._loading import (
    AnswererFile as AnswererFile,
    AnswererFileError as AnswererFileError,
    answerer_of as answerer_of,
    load_answerer as load_answerer,
    load_answerer_file as load_answerer_file,
)

__all__ = _publish(globals())
