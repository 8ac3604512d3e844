"""The built-in text scorers: exact, includes, choice, numeric, f1 and regex.

Pure: no trio, no I/O. Each is a small frozen class called as ``scorer(item, result)``; an item
without a target scores ``None`` (counted in ``n_error``) with the reason as explanation.
"""

from __future__ import annotations

import functools
import math
import re
import string
import unicodedata
from collections import Counter
from typing import Any

import attrs

from ._score import ItemLike, Score, targets_of

_SPACES = re.compile(r"\s+")
_NO_TARGET = "the item has no target"


@functools.lru_cache(maxsize=1024)  # exact, includes and choice normalize the same texts
def normalize(text: str) -> str:
    """Unicode NFKC, casefolded, surrounding whitespace stripped, inner runs collapsed to one space."""
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _response(result: Any) -> str:
    text = getattr(result, "final_response", None)
    return text if isinstance(text, str) else ""


@attrs.frozen
class Exact:
    """1 when the normalized response equals a normalized target, else 0."""

    def __call__(self, item: ItemLike, result: Any) -> Score:
        targets = targets_of(item)
        if not targets:
            return Score(None, explanation=_NO_TARGET)
        response = normalize(_response(result))
        return Score(1 if any(normalize(t) == response for t in targets) else 0)


@attrs.frozen
class Includes:
    """1 when a normalized target is a substring of the normalized response, else 0."""

    def __call__(self, item: ItemLike, result: Any) -> Score:
        targets = targets_of(item)
        if not targets:
            return Score(None, explanation=_NO_TARGET)
        response = normalize(_response(result))
        return Score(1 if any(normalize(t) in response for t in targets) else 0)


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


@attrs.frozen
class Choice:
    """Multiple choice: the extracted letter (see ``choice_answer``) equals the target's letter."""

    def __call__(self, item: ItemLike, result: Any) -> Score:
        targets = targets_of(item)
        if not targets:
            return Score(None, explanation=_NO_TARGET)
        choices = list(getattr(item, "choices", None) or [])
        letters = [choice_letter(t, choices) for t in targets]
        if all(letter is None for letter in letters):
            return Score(None, explanation=f"target {targets[0]!r} is neither a letter nor the text of one of the choices")
        answer = choice_answer(_response(result), len(choices))
        if answer is None:
            return Score(0, explanation="no answer letter found")
        return Score(1 if answer in letters else 0, answer=answer)


_NUMBER = re.compile(
    r"(?:(?<![0-9A-Za-z])-)?"  # a sign, unless it is a hyphen after a word or a number
    r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"  # 1,234,567.8 or 1234.5 or .5
    r"(?:[eE][-+]?\d+)?"
)


def last_number(text: str) -> tuple[str, float] | None:
    """The last number of ``text`` as (its text, its value); commas are thousands separators."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    written = found[-1]
    value = float(written.replace(",", ""))
    return (written, value) if math.isfinite(value) else None


@attrs.frozen
class Numeric:
    """The last number of the response equals the target's within ``rel_tol`` (math.isclose)."""

    rel_tol: float = 1e-6

    def __call__(self, item: ItemLike, result: Any) -> Score:
        targets = targets_of(item)
        if not targets:
            return Score(None, explanation=_NO_TARGET)
        wanted = [number for number in map(last_number, targets) if number is not None]
        if not wanted:
            return Score(None, explanation=f"target {targets[0]!r} holds no number")
        found = last_number(_response(result))
        if found is None:
            return Score(0, explanation="no number in the response")
        ok = any(math.isclose(found[1], value, rel_tol=self.rel_tol, abs_tol=0.0) for _, value in wanted)
        return Score(1 if ok else 0, answer=found[0])


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def squad_tokens(text: str) -> list[str]:
    """SQuAD's normalize_answer, split: lowercase, punctuation deleted, articles removed."""
    return list(_squad_tokens(text))


@functools.lru_cache(maxsize=1024)  # targets recur across epochs and scorers
def _squad_tokens(text: str) -> tuple[str, ...]:
    return tuple(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def token_f1(prediction: str, target: str) -> float:
    """SQuAD token F1 (two empty answers agree: 1; one empty: 0)."""
    return _f1(_squad_tokens(prediction), _squad_tokens(target))


def _f1(predicted: tuple[str, ...], gold: tuple[str, ...]) -> float:
    if not predicted or not gold:
        return float(predicted == gold)
    left = Counter(gold)
    same = 0
    for token in predicted:  # the size of the multiset intersection
        if left[token] > 0:
            left[token] -= 1
            same += 1
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


@attrs.frozen
class F1:
    """Token-level F1 of the response against each target; the best one."""

    def __call__(self, item: ItemLike, result: Any) -> Score:
        targets = targets_of(item)
        if not targets:
            return Score(None, explanation=_NO_TARGET)
        response = _squad_tokens(_response(result))
        return Score(max(_f1(response, _squad_tokens(t)) for t in targets))


@attrs.frozen
class Regex:
    """1 when ``pattern`` matches the response (``re.search``; ``re.fullmatch`` with ``fullmatch``)."""

    pattern: str
    fullmatch: bool = False
    _compiled: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.pattern))

    def __call__(self, item: ItemLike, result: Any) -> Score:
        text = _response(result)
        match = self._compiled.fullmatch(text) if self.fullmatch else self._compiled.search(text)
        return Score(1 if match else 0, answer=match.group(0) if match else None)
