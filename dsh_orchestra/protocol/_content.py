"""Content blocks: what prompts carry in and what assistant messages carry out.

Pure: no trio, no I/O. ``type`` selects the class (see ``_converter``); a block of a type
we do not know is kept whole as ``UnknownBlock``.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs


@attrs.frozen(kw_only=True)
class TextBlock:
    """``{"type": "text", "text": ...}``."""

    text: str
    type: Literal["text"] = "text"


@attrs.frozen(kw_only=True)
class ImageBlock:
    """An encoded image sent inline: ``{"type": "image", "data": <base64>, "mimeType": ...}``."""

    data: str
    mime_type: str
    type: Literal["image"] = "image"

    def __repr__(self) -> str:  # base64 payloads are huge: keep reprs readable
        return f"ImageBlock(mime_type={self.mime_type!r}, data=<{len(self.data)} base64 chars>)"


@attrs.frozen(kw_only=True)
class ImageAttachment:
    """An admitted image in the runtime's attachment store."""

    attachment_id: str
    media_type: str
    width: int | None = None
    height: int | None = None
    bytes: int | None = None


@attrs.frozen(kw_only=True)
class AttachedImageBlock:
    """An image the runtime rewrote to an attachment reference."""

    attachment: ImageAttachment
    type: Literal["image"] = "image"


@attrs.frozen(kw_only=True)
class ReasoningBlock:
    """The model's thinking: ``{"type": "reasoning", "text": ...}``."""

    text: str
    type: Literal["reasoning"] = "reasoning"


@attrs.frozen(kw_only=True)
class ToolCallBlock:
    """A tool call inside an assistant message; ``arguments`` is a raw JSON string."""

    id: str
    name: str
    arguments: str
    type: Literal["tool-call"] = "tool-call"


@attrs.frozen(kw_only=True)
class UnknownBlock:
    """A block of a type we do not model; ``raw`` is the whole block as received."""

    type: str
    raw: dict[str, Any]


ContentBlock = (
    TextBlock
    | ImageBlock
    | AttachedImageBlock
    | ReasoningBlock
    | ToolCallBlock
    | UnknownBlock
)

BLOCK_CLASSES: dict[str, type] = {
    "text": TextBlock,
    "reasoning": ReasoningBlock,
    "tool-call": ToolCallBlock,
}


def text_of(blocks: list[ContentBlock] | tuple[ContentBlock, ...] | None) -> str:
    """Concatenate the text of the ``text`` blocks (reasoning and tool calls ignored)."""
    if not blocks:
        return ""
    return "".join(block.text for block in blocks if isinstance(block, TextBlock))
