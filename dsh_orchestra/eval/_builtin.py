"""The built-in text scorers: exact, includes, choice, numeric, f1 and regex.

Pure: no trio, no I/O. Each is a small frozen class called as ``scorer(item, result)``; an item
without a target scores ``None`` (counted in ``n_error``) with the reason as explanation.
``record(text, targets, item)`` gives the same score as the result line's record, for callers
that score many scorers on one response (``score_attempt``: the response and targets are read
once, and no ``Score`` is built).
"""

from __future__ import annotations

import functools
import math
import re
import string
import unicodedata
from typing import Any

import attrs

from ._score import ItemLike, Score, ScoreRecord, targets_of

_NO_TARGET = "the item has no target"
_Found = tuple[float | int | None, str | None, str | None]  # value, answer, explanation


@functools.lru_cache(maxsize=1024)  # exact, includes and choice normalize the same texts
def normalize(text: str) -> str:
    """Unicode NFKC, casefolded, surrounding whitespace stripped, inner runs collapsed to one space."""
    if not text.isascii():  # ASCII is NFKC already and casefolds as lower()
        text = unicodedata.normalize("NFKC", text).casefold()
    else:
        text = text.lower()
    return " ".join(text.split())  # str.split() and re's \s both split on str.isspace() characters


def _response(result: Any) -> str:
    text = getattr(result, "final_response", None)
    return text if isinstance(text, str) else ""


class _Builtin:
    """A built-in scorer: ``find(text, targets, item)`` gives (value, answer, explanation)."""

    __slots__ = ()

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        """The score of ``text`` against ``targets``: (value, answer, explanation)."""
        raise NotImplementedError

    def __call__(self, item: ItemLike, result: Any) -> Score:
        value, answer, explanation = self.find(_response(result), targets_of(item), item)
        return Score(value, answer=answer, explanation=explanation)

    def record(self, text: str, targets: tuple[str, ...], item: Any) -> ScoreRecord:
        """The result line's record of this scorer on response ``text`` (the targets of ``item``)."""
        value, answer, explanation = self.find(text, targets, item)
        return {"value": None if value is None else float(value), "answer": answer, "explanation": explanation}


_NONE: _Found = (None, None, _NO_TARGET)


@attrs.frozen
class Exact(_Builtin):
    """1 when the normalized response equals a normalized target, else 0."""

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        response = normalize(text)
        for target in targets:
            if normalize(target) == response:
                return 1, None, None
        return 0, None, None


@attrs.frozen
class Includes(_Builtin):
    """1 when a normalized target is a substring of the normalized response, else 0."""

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        response = normalize(text)
        for target in targets:
            if normalize(target) in response:
                return 1, None, None
        return 0, None, None


_ANSWER = re.compile(r"answer\s*:\s*[(\[*]*\s*([a-z])", re.IGNORECASE)
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])")


def choice_answer(text: str, choices: int) -> str | None:
    """The letter after the last ``ANSWER:`` (any case, even out of range), else the last
    standalone capital letter among the first ``choices`` letters, else None."""
    found = _ANSWER.findall(text)
    if found:
        return str(found[-1]).upper()
    last = string.ascii_uppercase[: max(0, min(choices, 26))]
    for letter in reversed(_STANDALONE.findall(text)):
        if letter in last:
            return str(letter)
    return None


def choice_letter(target: str, choices: list[str]) -> str | None:
    """The letter a target names: a single letter, or the text of one of ``choices``."""
    stripped = target.strip()
    if len(stripped) == 1 and stripped.isascii() and stripped.isalpha():
        return stripped.upper()
    for index, text in enumerate(choices[:26]):  # the exact text first: no normalization needed
        if text.strip() == stripped:
            return string.ascii_uppercase[index]
    wanted = normalize(stripped)
    for index, text in enumerate(choices[:26]):
        if normalize(text) == wanted:
            return string.ascii_uppercase[index]
    return None


@functools.lru_cache(maxsize=1024)  # an item's targets and choices recur across epochs and runs
def _target_letters(targets: tuple[str, ...], choices: tuple[str, ...]) -> tuple[str | None, ...]:
    return tuple(choice_letter(t, list(choices)) for t in targets)


@attrs.frozen
class Choice(_Builtin):
    """Multiple choice: the extracted letter (see ``choice_answer``) equals the target's letter."""

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        choices = tuple(getattr(item, "choices", None) or ())
        try:
            letters = _target_letters(targets, choices)
        except TypeError:  # choices that do not hash (not strings): not cached
            letters = tuple(choice_letter(t, list(choices)) for t in targets)
        if not any(letters):  # letters are None or one capital letter
            return None, None, f"target {targets[0]!r} is neither a letter nor the text of one of the choices"
        answer = choice_answer(text, len(choices))
        if answer is None:
            return 0, None, "no answer letter found"
        return (1 if answer in letters else 0), answer, None


_NUMBER = re.compile(
    r"(?:(?<![0-9A-Za-z])-)?"  # a sign, unless it is a hyphen after a word or a number
    r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"  # 1,234,567.8 or 1234.5 or .5
    r"(?:[eE][-+]?\d+)?"
)


_LAST_DIGIT = re.compile(r".*\d", re.DOTALL)  # greedy: backtracks from the end to the last digit
_IN_NUMBER = frozenset(",.eE+-")


def last_number(text: str) -> tuple[str, float] | None:
    """The last number of ``text`` as (its text, its value); commas are thousands separators."""
    last = _LAST_DIGIT.match(text)
    if last is None:  # every number holds a digit
        return None
    # No match spans a character that is neither a digit nor one of ",.eE+-", so the matches
    # after such a character are the same whether the scan starts there or at the beginning
    # (the sign's look-behind still sees the text before it): scan only the last run.
    start = last.end() - 1
    while start > 0 and (text[start - 1] in _IN_NUMBER or text[start - 1].isdecimal()):
        start -= 1
    found = _NUMBER.findall(text, start)
    if not found:
        return None
    written: str = found[-1]
    value = float(written.replace(",", ""))
    return (written, value) if math.isfinite(value) else None


@functools.lru_cache(maxsize=1024)  # targets recur across epochs
def _target_numbers(targets: tuple[str, ...]) -> tuple[float, ...]:
    return tuple(number[1] for number in map(last_number, targets) if number is not None)


@attrs.frozen
class Numeric(_Builtin):
    """The last number of the response equals the target's within ``rel_tol`` (math.isclose)."""

    rel_tol: float = 1e-6

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        wanted = _target_numbers(targets)
        if not wanted:
            return None, None, f"target {targets[0]!r} holds no number"
        found = last_number(text)
        if found is None:
            return 0, None, "no number in the response"
        rel_tol, value = self.rel_tol, found[1]
        for number in wanted:
            if math.isclose(value, number, rel_tol=rel_tol, abs_tol=0.0):
                return 1, found[0], None
        return 0, found[0], None


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def squad_tokens(text: str) -> list[str]:
    """SQuAD's normalize_answer, split: lowercase, punctuation deleted, articles removed."""
    return list(_squad_tokens(text))


_PUNCTUATION_BYTES = string.punctuation.encode("ascii")
_ARTICLE_WORDS = frozenset({"a", "an", "the"})


@functools.lru_cache(maxsize=1024)  # targets recur across epochs and scorers
def _squad_tokens(text: str) -> tuple[str, ...]:
    text = text.lower()
    if text.isascii():  # the same deletion, done on bytes
        text = text.encode("ascii").translate(None, _PUNCTUATION_BYTES).decode("ascii")
    else:
        text = text.translate(_PUNCTUATION)
    tokens: list[str] = []
    for token in text.split():
        # _ARTICLES on the whole text, token by token: whitespace separates tokens, so \b
        # falls at their edges alike. An ASCII alphanumeric token matches only as a whole.
        if token.isascii() and token.isalnum():
            if token not in _ARTICLE_WORDS:
                tokens.append(token)
        else:
            tokens.extend(_ARTICLES.sub(" ", token).split())
    return tuple(tokens)


def token_f1(prediction: str, target: str) -> float:
    """SQuAD token F1 (two empty answers agree: 1; one empty: 0)."""
    return _f1(_squad_tokens(prediction), _squad_tokens(target))


def _counts(tokens: tuple[str, ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    return counts


@functools.lru_cache(maxsize=1024)
def _gold_counts(gold: tuple[str, ...]) -> dict[str, int]:
    return _counts(gold)


def _f1(predicted: tuple[str, ...], gold: tuple[str, ...], counted: dict[str, int] | None = None) -> float:
    if not predicted or not gold:
        return float(predicted == gold)
    counts = _counts(predicted) if counted is None else counted
    same = 0  # the size of the multiset intersection
    for token, count in _gold_counts(gold).items():
        have = counts.get(token)
        if have:
            same += count if count < have else have
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


@attrs.frozen
class F1(_Builtin):
    """Token-level F1 of the response against each target; the best one."""

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        response = _squad_tokens(text)
        counted = _counts(response)
        best = 0.0
        for target in targets:
            value = _f1(response, _squad_tokens(target), counted)
            if value > best:
                best = value
        return best, None, None


@attrs.frozen
class Regex(_Builtin):
    """1 when ``pattern`` matches the response (``re.search``; ``re.fullmatch`` with ``fullmatch``)."""

    pattern: str
    fullmatch: bool = False
    _compiled: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.pattern))

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        match = self._compiled.fullmatch(text) if self.fullmatch else self._compiled.search(text)
        return (1, match.group(0), None) if match else (0, None, None)
