"""The built-in text scorers: exact, includes, choice, numeric, f1 and regex.

Pure: no trio, no I/O. Each is a small frozen class called as ``scorer(item, result)``; an item
without a target scores ``None`` (counted in ``n_error``) with the reason as explanation.
``record(text, targets, item)`` gives the same score as the result line's record, for callers
that score many scorers on one response (``score_attempt``: the response and targets are read
once, and no ``Score`` is built).
"""

from __future__ import annotations

import collections
import functools
import math
import re
import string
import unicodedata
from typing import Any

import attrs
import regex

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
_EMPTY = "the response is empty"


@attrs.frozen
class Exact(_Builtin):
    """1 when the normalized response equals a normalized target, else 0."""

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        if not targets:
            return _NONE
        response = normalize(text)
        if not response:  # an empty response never matches (not even an empty target)
            return 0, None, _EMPTY
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
        if not response:
            return 0, None, _EMPTY
        for target in targets:
            wanted = normalize(target)
            if wanted and wanted in response:  # an empty target is in every text: it matches nothing
                return 1, None, None
        return 0, None, None


_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)
# After the last ANSWER:, one letter standing alone: (C), [C], *C*, C., C), C, then a word boundary.
_ONE_LETTER = re.compile(r"\s*[(\[*]*\s*([A-Za-z])(?![A-Za-z0-9])[)\].*]*")
# ... and another letter after it (A, B / A or B / A and B / A/B / A & B): no answer.
_ANOTHER = re.compile(r"\s*(?:,|/|&|\+|;|\b[oO][rR]\b|\b[aA][nN][dD]\b)\s*[(\[*]*\s*([A-Za-z])(?![A-Za-z0-9])")
# ... or letters run together (AB, ABD): each a capital, no repeats, in range.
_RUN = re.compile(r"\s*[(\[*]*\s*([A-Z]{2,26})(?![A-Za-z0-9])")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])")


def read_choice(text: str, choices: int) -> tuple[str | None, str | None]:
    """(the answer letter, None), or (None, the text after ``ANSWER:``) when that text names
    more than one letter (``A, B``, ``AB``, ``A or B``: a hedge is no answer), or (None, None).

    The letter after the last ``ANSWER:`` (any case) must stand alone: a word boundary after
    it (``(C)``, ``C.``, ``C)`` count; ``ANSWER: definitely B`` names no letter there). Without
    such a letter, the last standalone capital letter among the first ``choices`` letters."""
    found = list(_ANSWER.finditer(text))
    if found:
        rest = text[found[-1].end():]
        line = rest.split("\n", 1)[0] if rest.strip() else rest
        line = line if line.strip() else rest.lstrip().split("\n", 1)[0]
        span = max(0, min(choices, 26)) or 26
        run = _RUN.match(line)
        if run is not None and len(set(run.group(1))) == len(run.group(1)) and all(
                ord(c) - 65 < span for c in run.group(1)):
            return None, line.strip()
        one = _ONE_LETTER.match(line)
        if one is not None:
            another = _ANOTHER.match(line, one.end())
            if another is not None and another.group(1).isupper() == one.group(1).isupper():
                return None, line.strip()
            return one.group(1).upper(), None
    last = string.ascii_uppercase[: max(0, min(choices, 26))]
    for letter in reversed(_STANDALONE.findall(text)):
        if letter in last:
            return str(letter), None
    return None, None


def choice_answer(text: str, choices: int) -> str | None:
    """The answer letter of ``text`` (``read_choice``; None for no answer or more than one)."""
    return read_choice(text, choices)[0]


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
        answer, hedged = read_choice(text, len(choices))
        if hedged is not None:
            return 0, hedged, "more than one letter after ANSWER: (no answer)"
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


DASHES = "\u2212\u2012\u2013\ufe63\uff0d"
"""Read as ``-`` in numbers: minus sign, figure dash, en dash, small and full-width hyphen-minus."""
_AS_HYPHEN = str.maketrans({c: "-" for c in DASHES})


def last_number(text: str) -> tuple[str, float] | None:
    """The last number of ``text`` as (its text, its value); commas are thousands separators,
    and the signs of ``DASHES`` are minus signs (``−42`` is -42)."""
    original = text
    if not text.isascii():
        text = text.translate(_AS_HYPHEN)  # one character for one: the positions stay
    last = _LAST_DIGIT.match(text)
    if last is None:  # every number holds a digit
        return None
    # No match spans a character that is neither a digit nor one of ",.eE+-", so the matches
    # after such a character are the same whether the scan starts there or at the beginning
    # (the sign's look-behind still sees the text before it): scan only the last run.
    start = last.end() - 1
    while start > 0 and (text[start - 1] in _IN_NUMBER or text[start - 1].isdecimal()):
        start -= 1
    found = collections.deque(_NUMBER.finditer(text, start), maxlen=1)  # the last match
    if not found:
        return None
    match = found[0]
    value = float(match.group(0).replace(",", ""))
    return (original[match.start():match.end()], value) if math.isfinite(value) else None


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
        if not text.strip():
            return 0, None, _EMPTY
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
    """1 when ``pattern`` matches the response (a search; a full match with ``fullmatch``).

    The pattern is the user's, matched against model-chosen text: it is compiled with the
    ``regex`` package (``re``'s syntax) and each match stops after ``timeout`` seconds
    (``TimeoutError``: that scorer's error), as the approval rules' reason patterns do.
    """

    pattern: str
    fullmatch: bool = False
    timeout: float = 60.0
    _compiled: regex.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_compiled", regex.compile(self.pattern))

    def match(self, text: str, *, timeout: float | None = None, concurrent: bool = False) -> _Found:
        """(value, answer, explanation) of ``text``, the match bounded by ``timeout`` (default
        ``self.timeout``); ``concurrent`` releases the GIL while matching.

        Raises:
            TimeoutError: the match did not finish in time.
        """
        if not text.strip():
            return 0, None, _EMPTY
        bound = self.timeout if timeout is None else timeout
        method = self._compiled.fullmatch if self.fullmatch else self._compiled.search
        found = method(text, timeout=bound, concurrent=concurrent)
        return (1, found.group(0), None) if found else (0, None, None)

    def find(self, text: str, targets: tuple[str, ...], item: Any) -> _Found:
        return self.match(text)
