"""Run reports: one self-contained HTML file for a batch's results or a workflow result.

Sits on top of ``batch`` and ``workflow`` (it reads their files); ``dsh-orchestra report`` calls it.
"""

from .._public import publish as _publish
from ._build import write_compare as write_compare, write_report as write_report
from ._conversation import line_entries as line_entries, transcript_entries as transcript_entries
from ._data import (
    DEFAULT_MAX_TEXT as DEFAULT_MAX_TEXT,
    DEFAULT_MAX_TRANSCRIPT as DEFAULT_MAX_TRANSCRIPT,
    ReportInputError as ReportInputError,
    build_payload as build_payload,
    latency_stats as latency_stats,
    load_result_lines as load_result_lines,
    prompt_text as prompt_text,
)
from ._html import conversation_css as conversation_css, render_html as render_html
from ._markup import embed_json as embed_json
from ._transcript import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
    MAX_TRANSCRIPT_BYTES as MAX_TRANSCRIPT_BYTES,
    read_transcript_bounded as read_transcript_bounded,
)

__all__ = _publish(globals())
