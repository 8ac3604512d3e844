"""Batch evaluation: a JSON Lines dataset in, one result line per item out, exactly once.

Resumable after any crash, shardable across machines with no coordinator.
"""

from ._dataset import (
    BatchItem as BatchItem,
    DatasetError as DatasetError,
    in_shard as in_shard,
    load_dataset as load_dataset,
    parse_shard as parse_shard,
    stable_hash as stable_hash,
)
from ._progress import Counters as Counters, Progress as Progress
from ._results import ResultsWriter as ResultsWriter, read_results as read_results, result_line as result_line
from ._runner import (
    OK_FINISH_REASONS as OK_FINISH_REASONS,
    BatchOptions as BatchOptions,
    BatchUsageError as BatchUsageError,
    run_batch as run_batch,
)
from ._summary import BatchSummary as BatchSummary, percentile as percentile, summarize as summarize

__all__ = [
    "OK_FINISH_REASONS", "BatchItem", "BatchOptions", "BatchSummary", "BatchUsageError", "Counters",
    "DatasetError", "Progress", "ResultsWriter", "in_shard", "load_dataset", "parse_shard", "percentile",
    "read_results", "result_line", "run_batch", "stable_hash", "summarize",
]
