"""Batch evaluation: a JSON Lines dataset in, one result line per item out, exactly once.

Resumable after any crash, shardable across machines with no coordinator.
"""

from ._dataset import (
    BatchItem as BatchItem,
    DatasetCheck as DatasetCheck,
    DatasetError as DatasetError,
    check_dataset as check_dataset,
    iter_dataset as iter_dataset,
    in_shard as in_shard,
    load_dataset as load_dataset,
    parse_shard as parse_shard,
    stable_hash as stable_hash,
)
from ._progress import Counters as Counters, Progress as Progress
from ._results import (
    ResultsWriter as ResultsWriter,
    read_results as read_results,
    result_line as result_line,
    scan_results as scan_results,
)
from ._runner import (
    OK_FINISH_REASONS as OK_FINISH_REASONS,
    BatchOptions as BatchOptions,
    BatchUsageError as BatchUsageError,
    SessionBusyError as SessionBusyError,
    prepare_resume as prepare_resume,
    process_item as process_item,
    run_batch as run_batch,
)
from ._summary import BatchSummary as BatchSummary, Tally as Tally, percentile as percentile, summarize as summarize

__all__ = [
    "OK_FINISH_REASONS", "BatchItem", "BatchOptions", "BatchSummary", "BatchUsageError", "Counters",
    "DatasetCheck", "DatasetError", "Progress", "ResultsWriter", "SessionBusyError", "Tally",
    "check_dataset", "in_shard", "iter_dataset", "load_dataset", "parse_shard", "percentile",
    "prepare_resume", "process_item", "read_results", "result_line", "run_batch", "scan_results", "stable_hash", "summarize",
]
