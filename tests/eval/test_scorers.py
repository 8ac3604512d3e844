"""The built-in scorers' edge cases: Unicode, empty responses, several targets, no number, choices."""

from __future__ import annotations

import pytest

from dsh_orchestra.eval import (
    F1, Choice, EvalItem, EvalResult, Exact, Includes, Numeric, Regex, Score, choice_answer, last_number,
    normalize, squad_tokens, token_f1,
)


def item(target: str | list[str] | None = None, choices: list[str] | None = None) -> EvalItem:
    return EvalItem(id="q", prompt="?", target=target, choices=choices)


def said(text: str) -> EvalResult:
    return EvalResult(final_response=text)


# ---- normalization, exact, includes ---------------------------------------------------------

def test_normalize_is_nfkc_casefold_and_whitespace() -> None:
    assert normalize("  Ｓtraße\t\n  Nr.\u00a0５ ") == "strasse nr. 5"
    assert normalize("") == ""
    assert normalize("ﬁne") == "fine"  # the ligature folds (NFKC)


@pytest.mark.parametrize(
    ("target", "response", "value"),
    [
        ("Paris", "paris", 1),
        ("Paris", "  PARIS\n", 1),
        ("Paris", "Paris.", 0),
        ("new   york", "New York", 1),
        ("Ｐａｒｉｓ", "paris", 1),  # full-width letters (NFKC)
        ("MASSE", "maße", 1),  # casefold, not lower
        ("Paris", "", 0),
        ("", "", 0),  # an empty response never matches, not even an empty target
        ("", "   \n", 0),
        (["Lyon", "Paris"], "paris", 1),
        (["Lyon", "Nice"], "paris", 0),
    ],
)
def test_exact(target: str | list[str], response: str, value: int) -> None:
    assert Exact()(item(target), said(response)).value == value


@pytest.mark.parametrize(
    ("target", "response", "value"),
    [
        ("Paris", "The answer is PARIS.", 1),
        ("new york", "It is New\n  York City", 1),
        ("Paris", "", 0),
        (["Rome", "paris"], "I'd say Paris", 1),
        (["Rome", "Nice"], "Paris", 0),
        ("café", "CAFÉ au lait", 1),
    ],
)
def test_includes(target: str | list[str], response: str, value: int) -> None:
    assert Includes()(item(target), said(response)).value == value


@pytest.mark.parametrize("scorer", [Exact(), Includes(), Choice(), Numeric(), F1()])
def test_no_target_scores_null_with_a_reason(scorer: object) -> None:
    score = scorer(item(None, ["a", "b"]), said("A"))  # type: ignore[operator]
    assert score == Score(None, explanation="the item has no target")


# ---- choice ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "n", "answer"),
    [
        ("ANSWER: C", 4, "C"),
        ("answer: c", 4, "C"),
        ("Answer:b", 4, "B"),
        ("ANSWER: A ... on reflection ANSWER: D", 4, "D"),
        ("ANSWER: Z", 4, "Z"),  # out of range: still the answer
        ("I pick B", 4, "B"),
        ("A is wrong, so B. Not C", 4, "C"),  # the last standalone capital in range
        ("B, or maybe E", 4, "B"),  # E is out of range: skipped
        ("ABC and D", 3, None),  # no standalone letter in range
        ("", 4, None),
        ("I think B", 0, None),  # no choices: no range to fall back on
        # the letter after ANSWER: stands alone, else the fallback (issue 25)
        ("Final answer: definitely B", 4, "B"),
        ("My answer: cats are mammals", 4, None),
        ("ANSWER: (C)", 4, "C"),
        ("ANSWER: C.", 4, "C"),
        ("ANSWER: C)", 4, "C"),
        ("ANSWER: **C**", 4, "C"),
        ("ANSWER: C. Because A is wrong", 4, "C"),
        ("ANSWER: C and that is final", 4, "C"),
        # more than one letter is no answer
        ("ANSWER: A, B", 4, None),
        ("ANSWER: AB", 4, None),
        ("ANSWER: A or B", 4, None),
        ("ANSWER: A/B", 4, None),
    ],
)
def test_choice_answer(text: str, n: int, answer: str | None) -> None:
    assert choice_answer(text, n) == answer


@pytest.mark.parametrize(
    ("target", "response", "value", "answer"),
    [
        ("B", "ANSWER: B", 1, "B"),
        ("b", "answer: b", 1, "B"),
        ("Berlin", "ANSWER: B", 1, "B"),  # a choice's text: its letter
        ("berlin", "ANSWER: B", 1, "B"),
        ("C", "ANSWER: Q", 0, "Q"),  # out of range: the answer, scored 0
        ("C", "no letter here", 0, None),
        ("A", "", 0, None),
        (["A", "C"], "C it is", 1, "C"),  # several accepted targets
        ("A", "ANSWER: A, B", 0, "A, B"),  # a hedge scores 0; the text is its answer
        ("A", "ANSWER: AB", 0, "AB"),
        ("B", "ANSWER: A or B", 0, "A or B"),
        ("B", "Final answer: definitely B", 1, "B"),
        ("C", "My answer: cats are mammals", 0, None),
    ],
)
def test_choice(target: str | list[str], response: str, value: int, answer: str | None) -> None:
    score = Choice()(item(target, ["Athens", "Berlin", "Cairo"]), said(response))
    assert (score.value, score.answer) == (value, answer)


def test_choice_target_that_names_nothing_is_null() -> None:
    score = Choice()(item("Madrid", ["Athens", "Berlin"]), said("ANSWER: A"))
    assert score.value is None and "neither a letter" in (score.explanation or "")


# ---- numeric ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("the total is -1,234.5e3 units", ("-1,234.5e3", -1234500.0)),
        ("1,234,567", ("1,234,567", 1234567.0)),
        ("from 3 to 4.5", ("4.5", 4.5)),
        ("pages 3-4", ("4", 4.0)),  # a hyphen between numbers is not a sign
        ("x = -7.", ("-7", -7.0)),
        ("2.5E-3", ("2.5E-3", 0.0025)),
        ("about .5", (".5", 0.5)),
        ("no number at all", None),
        ("", None),
        ("1,2", ("2", 2.0)),  # not a thousands group: two numbers
        ("\u221242", ("\u221242", -42.0)),  # the Unicode minus sign
        ("x = \u22127.5", ("\u22127.5", -7.5)),
        ("\u201212", ("\u201212", -12.0)),  # figure dash
        ("it is \u20133", ("\u20133", -3.0)),  # en dash
        ("\ufe635", ("\ufe635", -5.0)),  # small hyphen-minus
        ("\uff0d5", ("\uff0d5", -5.0)),  # full-width hyphen-minus
        ("pages 3\u20134", ("4", 4.0)),  # after a digit: a dash between numbers, not a sign
    ],
)
def test_last_number(text: str, found: tuple[str, float] | None) -> None:
    assert last_number(text) == found


@pytest.mark.parametrize(
    ("target", "response", "value"),
    [
        ("42", "The answer is 42.", 1),
        ("42", "41 or 42", 1),
        ("42", "42 or 41", 0),  # the last number counts
        ("1234500", "-1,234.5e3"[1:], 1),
        ("-1234500", "-1,234.5e3", 1),
        ("1000000", "1000000.5", 1),  # within 1e-6 relative
        ("1000000", "1000002", 0),
        ("0", "0.0", 1),
        ("3.14", "pi is about 3.14159", 0),
        (["7", "seven"], "7", 1),
        ("42", "no number", 0),
        ("42", "", 0),
    ],
)
def test_numeric(target: str | list[str], response: str, value: int) -> None:
    assert Numeric()(item(target), said(response)).value == value


def test_numeric_rel_tol_and_recorded_answer() -> None:
    score = Numeric(rel_tol=0.01)(item("3.14"), said("pi is about 3.14159"))
    assert (score.value, score.answer) == (1, "3.14159")


def test_numeric_target_without_number_is_null() -> None:
    score = Numeric()(item("unknown"), said("42"))
    assert score.value is None and "holds no number" in (score.explanation or "")


# ---- f1 --------------------------------------------------------------------------------------

def test_squad_normalization_deletes_punctuation_and_articles() -> None:
    assert squad_tokens("The cat's  hat, an APPLE!") == ["cats", "hat", "apple"]
    assert squad_tokens("well-known") == ["wellknown"]  # deleted, not replaced by a space


@pytest.mark.parametrize(
    ("prediction", "target", "f1"),
    [
        ("the cat sat", "cat sat", 1.0),
        ("cat sat on the mat", "cat sat", 2 * (2 / 4) * 1.0 / (2 / 4 + 1.0)),
        ("dog", "cat", 0.0),
        ("", "", 1.0),
        ("", "cat", 0.0),
        ("cat", "", 0.0),
        ("the", "a", 1.0),  # both normalize to no tokens
        ("cat cat dog", "cat dog dog", 2 * (2 / 3) * (2 / 3) / (4 / 3)),
    ],
)
def test_token_f1(prediction: str, target: str, f1: float) -> None:
    assert token_f1(prediction, target) == pytest.approx(f1)


def test_f1_is_the_best_over_targets() -> None:
    assert F1()(item(["zebra", "cat sat"]), said("The cat sat.")).value == 1.0
    assert F1()(item("cat sat"), said("")).value == 0.0


# ---- regex -----------------------------------------------------------------------------------

def test_regex_search_and_fullmatch() -> None:
    assert Regex(r"\d{3}")(item(), said("code 123 ok")) == Score(1, answer="123")
    assert Regex(r"\d{3}", fullmatch=True)(item(), said("code 123 ok")) == Score(0)
    assert Regex(r"\d{3}", fullmatch=True)(item(), said("123")) == Score(1, answer="123")
    assert Regex(r"x")(item(), said("")).value == 0


# ---- the fast paths equal the documented formulas -------------------------------------------

def test_normalize_equals_the_formula_on_random_text() -> None:
    """ASCII takes a shortcut (lower + split/join); it must equal NFKC + casefold + \\s+ collapse."""
    import random
    import re
    import unicodedata

    spaces = re.compile(r"\s+")
    alphabet = list("aB \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u00a0\u2028\u3000Ｓßﬁ５İx")
    rnd = random.Random(2)
    for _ in range(20_000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 10)))
        assert normalize(text) == spaces.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip(), repr(text)


def test_squad_tokens_equal_the_squad_script_on_random_text() -> None:
    """Punctuation deleted on bytes for ASCII, articles dropped token by token: the same tokens
    as SQuAD's normalize_answer(...).split()."""
    import random
    import re
    import string

    def squad(text: str) -> list[str]:
        text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
        return re.sub(r"\b(a|an|the)\b", " ", text).split()

    alphabet = list("aantheTHE b_c1 ,.-'é€©\u00a0\t\nİß") + ["the", "an", "a", " a ", "The", "A€", "é"]
    rnd = random.Random(1)
    for _ in range(20_000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12)))
        assert squad_tokens(text) == squad(text), repr(text)


def test_last_number_equals_the_last_match_of_a_full_scan_on_random_text() -> None:
    """last_number scans only the text's last run of number characters: the same answer as
    the last of every match from the start."""
    import math
    import random

    from dsh_orchestra.eval._builtin import _NUMBER

    def full_scan(text: str) -> tuple[str, float] | None:
        found = _NUMBER.findall(text)
        if not found:
            return None
        value = float(found[-1].replace(",", ""))
        return (found[-1], value) if math.isfinite(value) else None

    alphabet = list("0123456789,.eE+- aAx_\n١٢٣۵") + ["1,234", "-5", "1e309", "e3", ".5", "x-1", "2,3456"]
    rnd = random.Random(3)
    for _ in range(30_000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 14)))
        assert last_number(text) == full_scan(text), repr(text)


def test_numeric_reads_the_unicode_minus_as_a_sign() -> None:
    assert Numeric()(item("-42"), said("The answer is \u221242")).value == 1
    assert Numeric()(item("42"), said("The answer is \u221242")).value == 0
    assert Numeric()(item("\u221242"), said("-42")).value == 1


@pytest.mark.parametrize("scorer", [Exact(), Includes(), F1(), Regex(".*"), Regex("\\s*", fullmatch=True)])
@pytest.mark.parametrize("response", ["", "  \n\t"])
@pytest.mark.parametrize("target", ["", "Paris"])
def test_an_empty_response_never_matches(scorer: object, response: str, target: str) -> None:
    score = scorer(item(target), said(response))  # type: ignore[operator]
    assert score.value == 0 and score.explanation == "the response is empty"


def test_an_empty_target_is_in_no_response() -> None:
    assert Includes()(item(""), said("anything")).value == 0
    assert Includes()(item(["", "par"]), said("Paris")).value == 1
