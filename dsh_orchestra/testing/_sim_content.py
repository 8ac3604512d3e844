"""Fixed texts and content handling of the simulated runtime.

Owns what the real runtime writes in words (runtime-context snapshots, working-directory and
subagent notices, the tool list of ``request/header``), session titles, the admission of
encoded images into attachment references, and reading the prompt text out of content blocks.
Pure apart from :func:`admit_image` optionally writing the image bytes into a directory.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Final

from ..protocol import (
    AttachedImageBlock,
    ContentBlock,
    ImageAttachment,
    ImageBlock,
    TextBlock,
    UnknownBlock,
)

SYSTEM_PROMPT: Final = (
    "You are an AI agent powered by DeepSeek Harness (simulated).\n\n"
    "You are a coding agent powered by the {model} model."
)
CONTEXT_HEAD: Final = "Current runtime context. This snapshot supersedes earlier runtime-context snapshots."
PARENT_NOTE: Final = (
    'Your parent agent id is "{parent}". Before you finish, send your result to that agent with '
    'send_message({{ agent_id: "{parent}", message: "<self-contained result>" }}). The parent shares '
    "your workspace but does not automatically receive your transcript, tool output, or reasoning. "
    "Send earlier messages as well when a finding changes what the parent should do next; sending a "
    "message does not end your turn."
)
CHILD_FINISHED: Final = "Background subagent {child} finished and will do no further work unless you send it more."
CHILD_TRUNCATED: Final = "Background subagent {child} ran out of room before it finished."
CHILD_FAILED: Final = "Background subagent {child} failed before it finished."
CLOSING: Final = "Its closing message:"
NO_CLOSING: Final = "It left no closing message."
# Text blocks the runtime adds and that are never the prompt (as the fake model reads them).
CONTEXT_PREFIXES: Final = ("Current runtime context.", "Your parent agent id is ", "The working directory ")
TITLE_LIMIT: Final = 40
QUESTION_TOOL: Final = "ask_user_question"

_TOOLS: Final = (
    ("bash", "Execute a bash command and return its output.", ("description", "command")),
    ("create_goal", "Create a persisted goal for this session.", ("objective",)),
    ("edit", "Edit an existing UTF-8 text file by replacing literal text.", ("file_path", "old_string", "new_string")),
    ("exit_plan_mode", "Present your plan for review and leave plan mode.", ("plan",)),
    ("get_goal", "Read the current session goal.", ()),
    ("glob", "Find files whose paths match a glob pattern.", ("pattern",)),
    ("grep", "Search file contents with a regular expression.", ("pattern",)),
    ("interrupt_agent", "Ask a subagent to stop its current work.", ("agent_id",)),
    ("job_kill", "Request cancellation of a running background job.", ("job_id",)),
    ("job_list", "List your background jobs.", ()),
    ("job_output", "Read a background job's output.", ("job_id",)),
    ("list_agents", "List subagents you started.", ()),
    ("read", "Read a UTF-8 text file and return line-numbered content.", ("file_path",)),
    ("read_image", "Read an image file and return the image itself.", ("file_path",)),
    ("send_message", "Send a message to an agent.", ("agent_id", "message")),
    ("skill", "Load the full instructions for a skill.", ("name",)),
    ("subagent", "Delegate a self-contained task to a subagent.", ("description", "prompt")),
    ("subagent_fork", "Delegate a task to a subagent that inherits this conversation.", ("description", "prompt")),
    ("todo_write", "Record and update a task list.", ("todos",)),
    ("update_goal", "Update the current goal.", ("goal_id", "revision", "action")),
    ("web_fetch", "Fetch the content of a specific HTTP(S) URL.", ("url",)),
    ("web_search", "Search the web for current information.", ("queries",)),
    ("workflow", "Run a JavaScript workflow script that orchestrates subagents.", ("script", "meta")),
    ("working_directory", "Read the current working directory, or change it with cd.", ()),
    ("write", "Create or fully replace a UTF-8 text file.", ("file_path", "content")),
)
_QUESTION_TOOL_SPEC: Final = (QUESTION_TOOL, "Ask the user questions and wait for the answers.", ("questions",))
TOOL_NAMES: Final = frozenset(name for name, _, _ in _TOOLS)
REQUIRED_ARGS: Final = {name: required for name, _, required in (*_TOOLS, _QUESTION_TOOL_SPEC)}


def quote(text: str) -> str:
    """Quote a path the way the runtime's texts do (JSON string syntax)."""
    return json.dumps(text, ensure_ascii=False)


def tool_list(*, questions: bool) -> list[dict[str, Any]]:
    """The (small) tool declarations of ``request/header``; the question tool when enabled."""
    specs = (*_TOOLS, _QUESTION_TOOL_SPEC) if questions else _TOOLS
    return [
        {"name": name, "description": description, "parameters": {
            "type": "object", "properties": {arg: {"type": "string"} for arg in required},
            "required": list(required)}}
        for name, description, required in specs
    ]


def runtime_context(cwd: str, workspace: str) -> tuple[str, list[dict[str, str]]]:
    """Text and sections of a ``runtime-context`` snapshot message."""
    sections = [
        {"name": "working-directory:current", "text": f"Current working directory: {quote(cwd)}."},
        {"name": "sandbox:policy", "text": (
            "Current DSH file policy: workspace-write. Any available operation enforced by the DSH "
            "file sandbox may modify files under the session workspace: "
            f"{quote(workspace)}. Some platform temporary areas may also be writable.")},
        {"name": "approval:policy", "text": (
            "Approval policy: ask. Operations that require approval may ask through the configured "
            "answerers; without an available answerer, the request fails closed.")},
    ]
    return "\n\n".join([CONTEXT_HEAD, *(section["text"] for section in sections)]), sections


def cwd_changed(old: str, new: str) -> str:
    """The notice of a working-directory change."""
    return f"The working directory changed from {quote(old)} to {quote(new)}."


def cwd_unavailable(old: str, new: str) -> str:
    """The notice of a vanished working directory falling back to the origin."""
    return f"The working directory {quote(old)} is unavailable. The working directory is now {quote(new)}."


def title_of(blocks: list[ContentBlock]) -> str:
    """A fallback session title: the prompt's text, cut at a word boundary."""
    words = " ".join(block.text for block in blocks if isinstance(block, TextBlock)).split()
    title = ""
    for word in words:
        candidate = f"{title} {word}" if title else word
        if len(candidate) > TITLE_LIMIT:
            return title or word[:TITLE_LIMIT]
        title = candidate
    return title


def prompt_text(blocks: list[ContentBlock]) -> str:
    """The newest prompt-like text block (context and notice blocks skipped), or ``""``."""
    for block in reversed(blocks):
        if isinstance(block, TextBlock) and not block.text.startswith(CONTEXT_PREFIXES):
            return block.text
    return ""


def unsupported(blocks: list[ContentBlock]) -> UnknownBlock | None:
    """The first block the simulated model cannot take (unknown type), if any."""
    return next((block for block in blocks if isinstance(block, UnknownBlock)), None)


# ---- images --------------------------------------------------------------------------


class ImageError(ValueError):
    """An encoded image was refused; the message is the runtime's."""


NOT_CANONICAL: Final = "Image upload is not canonical base64."
WRONG_TYPE: Final = "Declared image type does not match its bytes."


def _dimensions(data: bytes) -> tuple[str, int, int] | None:
    """(media type, width, height) from the image's own header, or None when unknown."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return "image/webp", 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return "image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return "image/webp", width & 0x3FFF, height & 0x3FFF
    if data.startswith(b"\xff\xd8\xff"):
        return _jpeg(data)
    return None


def _jpeg(data: bytes) -> tuple[str, int, int] | None:
    index = 2
    while index + 9 < len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        length = int.from_bytes(data[index + 2:index + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[index + 5:index + 9])
            return "image/jpeg", width, height
        index += 2 + length
    return None


def admit_image(block: ImageBlock, attachments: Path | None) -> AttachedImageBlock:
    """Check an encoded image and rewrite it to an attachment reference.

    Raises:
        ImageError: the base64 is not canonical, or the bytes are not the declared type.
    """
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError(NOT_CANONICAL) from None
    if base64.b64encode(data).decode("ascii") != block.data:
        raise ImageError(NOT_CANONICAL)
    found = _dimensions(data)
    if found is None or found[0] != block.mime_type:
        raise ImageError(WRONG_TYPE)
    digest = hashlib.sha256(data).hexdigest()
    if attachments is not None:
        attachments.mkdir(parents=True, exist_ok=True)
        target = attachments / digest
        if not target.exists():
            target.write_bytes(data)
    media_type, width, height = found
    return AttachedImageBlock(attachment=ImageAttachment(
        attachment_id=f"sha256:{digest}", media_type=media_type, width=width, height=height, bytes=len(data)))
