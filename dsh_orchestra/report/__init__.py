"""Run reports: one self-contained HTML file for a batch's results or a workflow result.

Sits on top of ``batch`` and ``workflow`` (it reads their files); ``dsh-orchestra report`` calls it.
"""

from .._public import publish as _publish
from ._build import write_compare as write_compare, write_report as write_report
from ._data import (
    DEFAULT_MAX_TEXT as DEFAULT_MAX_TEXT,
    DEFAULT_MAX_TRANSCRIPT as DEFAULT_MAX_TRANSCRIPT,
    ReportInputError as ReportInputError,
    build_payload as build_payload,
    latency_stats as latency_stats,
    load_result_lines as load_result_lines,
)
from ._html import render_html as render_html
from ._markup import embed_json as embed_json

__all__ = _publish(globals())
