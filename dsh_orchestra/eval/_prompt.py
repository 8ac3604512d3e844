"""The multiple-choice prompt: an item with ``choices`` is sent as a template rendered with its
question, its options lettered A, B, C... and the letters (docs/evaluation.md).

Pure: no trio, no I/O. ``[prompt] template`` of the scoring file replaces the template, and
``template = "none"`` sends prompts as written.
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

DEFAULT_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response must be of "
    "the form \"ANSWER: <letter>\" (without quotes), where <letter> is one of {letters}.\n"
    "\n"
    "{prompt}\n"
    "\n"
    "{choices}"
)
"""The default template: ``{prompt}`` the item's prompt, ``{choices}`` one ``A) text`` line per
option, ``{letters}`` ``A, B, C``."""

NO_TEMPLATE = "none"
"""``[prompt] template = "none"``: prompts are sent as written, choices or not."""

PLACEHOLDERS = ("prompt", "choices", "letters")
_FIELD = re.compile(r"\{(prompt|choices|letters)\}")
_ANY_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class TemplateError(ValueError):
    """A prompt template that cannot be used; the message says what to fix."""


def check_template(template: Any, where: str = "[prompt] template") -> str:
    """``template`` checked: a string holding ``{prompt}`` and ``{choices}`` (and ``{letters}``
    if it likes), no other ``{name}``; or ``"none"``.

    Raises:
        TemplateError: another type, a missing or unknown placeholder.
    """
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(f"{where} must be a non-empty string (or \"none\"), not {template!r}")
    if template == NO_TEMPLATE:
        return template
    unknown = sorted({m.group(1) for m in _ANY_FIELD.finditer(template)} - set(PLACEHOLDERS))
    if unknown:
        raise TemplateError(f"{where} has unknown placeholder(s) {['{' + u + '}' for u in unknown]}; "
                            "it may use {prompt}, {choices} and {letters}")
    missing = [f"{{{name}}}" for name in ("prompt", "choices") if f"{{{name}}}" not in template]
    if missing:
        raise TemplateError(f"{where} needs {' and '.join(missing)} (the question and its lettered options)")
    return template


def render_choices(template: str, prompt: str, choices: Sequence[str]) -> str:
    """``template`` with ``{prompt}``, ``{choices}`` (``A) text`` lines) and ``{letters}``."""
    letters = string.ascii_uppercase[: len(choices)]
    values = {
        "prompt": prompt,
        "choices": "\n".join(f"{letter}) {text}" for letter, text in zip(letters, choices, strict=False)),
        "letters": ", ".join(letters),
    }
    return _FIELD.sub(lambda m: values[m.group(1)], template)


def render_prompt(template: str, prompt: str | list[dict[str, Any]], choices: Sequence[str] | None) -> str | list[dict[str, Any]]:
    """The prompt to send for an item: rendered by ``template`` when it has choices (a content
    list's first text block is the question; without one, a text block is put first), else
    ``prompt`` itself. ``"none"`` never renders."""
    if not choices or template == NO_TEMPLATE:
        return prompt
    if isinstance(prompt, str):
        return render_choices(template, prompt, choices)
    blocks = [dict(block) for block in prompt]
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            block["text"] = render_choices(template, block["text"], choices)
            return blocks
    return [{"type": "text", "text": render_choices(template, "", choices)}, *blocks]
