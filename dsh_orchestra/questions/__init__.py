"""User questions: answerer protocol, built-in answerers, validation, QuestionService.

Imports only the protocol layer.
"""

from ._answerers import (
    DISMISS as DISMISS,
    Answerer as Answerer,
    QuestionAnswerError as QuestionAnswerError,
    QuestionService as QuestionService,
    QuestionsRequest as QuestionsRequest,
    ask_terminal as ask_terminal,
    by_rule as by_rule,
    first_option as first_option,
    validate_answers as validate_answers,
)

__all__ = [
    "DISMISS", "Answerer", "QuestionAnswerError", "QuestionService", "QuestionsRequest",
    "ask_terminal", "by_rule", "first_option", "validate_answers",
]
