"""Batch evaluation: a JSON Lines dataset in, one result line per item out, exactly once.

Resumable after any crash, shardable across machines with no coordinator. What users call:
``run_batch`` and its options, the dataset and results helpers, and the executor protocol
(docs/architecture.md) with the local ``PoolExecutor``.
"""

from .._public import publish as _publish
from ._dataset import (
    BatchItem as BatchItem,
    DatasetCheck as DatasetCheck,
    DatasetError as DatasetError,
    check_dataset as check_dataset,
    in_shard as in_shard,
    iter_dataset as iter_dataset,
    load_dataset as load_dataset,
    parse_shard as parse_shard,
    stable_hash as stable_hash,
)
from ._index import DatasetIndex as DatasetIndex, index_dataset as index_dataset
from ._crashes import ALONE_AFTER as ALONE_AFTER, RUNTIME_CRASHED as RUNTIME_CRASHED
from ._executor import (
    Attempt as Attempt,
    AttemptRunner as AttemptRunner,
    Executor as Executor,
    RuntimeCrash as RuntimeCrash,
    SharedPlaces as SharedPlaces,
)
from ._control import ControlError as ControlError, send_command as send_command
from ._merge import MergeError as MergeError, MergeReport as MergeReport, merge_results as merge_results
from ._local import PoolExecutor as PoolExecutor, PoolRunner as PoolRunner, attempt_on_pool as attempt_on_pool
from ._options import (
    MAX_SESSIONS_PER_RUNTIME as MAX_SESSIONS_PER_RUNTIME,
    BatchOptions as BatchOptions,
    BatchUsageError as BatchUsageError,
)
from ._results import (
    ResultsFileError as ResultsFileError,
    ResultsLockedError as ResultsLockedError,
    ResultsTamperedError as ResultsTamperedError,
    ResultsWriter as ResultsWriter,
    read_results as read_results,
    scan_results as scan_results,
)
from ._runner import run_batch as run_batch
from ._score import score_results as score_results
from ._summary import BatchSummary as BatchSummary, Tally as Tally, summarize as summarize
from ._transcripts import (
    may_write_transcript as may_write_transcript,
    read_transcript as read_transcript,
    transcript_name as transcript_name,
)

__all__ = _publish(globals())
