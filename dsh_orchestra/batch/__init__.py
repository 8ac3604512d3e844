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
from ._crashes import ALONE_AFTER as ALONE_AFTER, RUNTIME_CRASHED as RUNTIME_CRASHED
from ._executor import (
    Attempt as Attempt,
    AttemptRunner as AttemptRunner,
    Executor as Executor,
    RuntimeCrash as RuntimeCrash,
)
from ._local import PoolExecutor as PoolExecutor, PoolRunner as PoolRunner, attempt_on_pool as attempt_on_pool
from ._options import BatchOptions as BatchOptions, BatchUsageError as BatchUsageError
from ._progress import Counters as Counters, Progress as Progress
from ._results import (
    ResultsFileError as ResultsFileError,
    ResultsLock as ResultsLock,
    ResultsLockedError as ResultsLockedError,
    ResultsWriter as ResultsWriter,
    read_results as read_results,
    result_line as result_line,
    result_problem as result_problem,
    scan_results as scan_results,
)
from ._runner import PLACE_LOST as PLACE_LOST, run_batch as run_batch
from ..pool import SessionBusyError as SessionBusyError
from ..session import OK_FINISH_REASONS as OK_FINISH_REASONS
from ._transcripts import read_transcript as read_transcript, transcript_name as transcript_name
from ._summary import BatchSummary as BatchSummary, Tally as Tally, percentile as percentile, summarize as summarize

__all__ = [
    "ALONE_AFTER", "OK_FINISH_REASONS", "PLACE_LOST", "RUNTIME_CRASHED", "RuntimeCrash", "Attempt", "AttemptRunner", "BatchItem", "BatchOptions", "BatchSummary",
    "BatchUsageError", "Counters", "DatasetCheck", "DatasetError", "Executor", "PoolExecutor", "PoolRunner", "Progress",
    "ResultsFileError", "ResultsLock", "ResultsLockedError", "ResultsWriter", "SessionBusyError", "Tally", "attempt_on_pool", "check_dataset", "in_shard", "iter_dataset",
    "load_dataset", "parse_shard", "percentile", "read_results", "read_transcript", "result_line", "transcript_name", "result_problem", "run_batch", "scan_results",
    "stable_hash", "summarize",
]
