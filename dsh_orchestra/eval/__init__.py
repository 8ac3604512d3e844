"""Evaluation: scorers, epoch reducers, metrics with stderr and bootstrap intervals (clustered too),
many-run comparisons with adjusted p-values, power planning, judge agreement, usage and cost.

Pure where it can be (a results file in, numbers out); only the ``judge`` scorer runs a session
(through a pool lease). Knows nothing about datasets' files, batches or the CLI.
"""

from .._public import publish as _publish
from ._apply import (
    AttemptScores as AttemptScores,
    BoundScorer as BoundScorer,
    bind_scorers as bind_scorers,
    check_scorers as check_scorers,
    error_scores as error_scores,
    load_function as load_function,
    score_attempt as score_attempt,
)
from ._builtin import (
    F1 as F1,
    Choice as Choice,
    Exact as Exact,
    Includes as Includes,
    Numeric as Numeric,
    Regex as Regex,
    choice_answer as choice_answer,
    last_number as last_number,
    normalize as normalize,
    squad_tokens as squad_tokens,
    token_f1 as token_f1,
)
from ._agreement import (
    LabelsError as LabelsError,
    agreement as agreement,
    kappa as kappa,
    parse_labels as parse_labels,
    ppi_mean as ppi_mean,
)
from ._cluster import (
    ClusterError as ClusterError,
    check_cluster_field as check_cluster_field,
    cluster_bootstrap_ci as cluster_bootstrap_ci,
    cluster_stderr as cluster_stderr,
    design_effect as design_effect,
)
from ._columns import (
    ReducedRun as ReducedRun,
    RunColumns as RunColumns,
    RunInputError as RunInputError,
    compare_line_problem as compare_line_problem,
    read_run as read_run,
    reduce_run as reduce_run,
    run_columns as run_columns,
)
from ._compare import (
    CompareInputError as CompareInputError,
    compare_runs as compare_runs,
    reduce_items as reduce_items,
    scorer_names as scorer_names,
    mcnemar_exact as mcnemar_exact,
    sign_flip_test as sign_flip_test,
)
from ._epochs import epoch_variance as epoch_variance
from ._many import compare_many as compare_many
from ._multiple import adjust_pvalues as adjust_pvalues
from ._power import PlanInputError as PlanInputError, items_needed as items_needed, min_detectable as min_detectable, plan_runs as plan_runs
from ._config import (
    ScorerSpec as ScorerSpec,
    ScoringError as ScoringError,
    ScoringFile as ScoringFile,
    load_scoring as load_scoring,
    parse_scoring as parse_scoring,
    resolve_scorers as resolve_scorers,
)
from ._inputs import TARGET_KINDS as TARGET_KINDS, check_plan_inputs as check_plan_inputs
from ._frames import (
    Comparison as Comparison,
    Frame as Frame,
    ResultsFrame as ResultsFrame,
    comparison_frame as comparison_frame,
    load_results as load_results,
    result_columns as result_columns,
    summary_frame as summary_frame,
)
from ._judge import GRADES as GRADES, Judge as Judge, Lease as Lease, JudgeError as JudgeError, Verdict as Verdict, judge_prompt as judge_prompt, open_judges as open_judges
from ._judge import judge_spec as judge_spec
from ._metrics import (
    BOOTSTRAP_RESAMPLES as BOOTSTRAP_RESAMPLES,
    DEFAULT_REDUCER as DEFAULT_REDUCER,
    Reducer as Reducer,
    Reduced as Reduced,
    ScoreTally as ScoreTally,
    bootstrap_ci as bootstrap_ci,
    MISSING_GROUP as MISSING_GROUP,
    cluster_metrics as cluster_metrics,
    group_key as group_key,
    group_names as group_names,
    group_value as group_value,
    mean as mean,
    metrics as metrics,
    parse_reducer as parse_reducer,
    pass_at_k as pass_at_k,
    pass_hat_k as pass_hat_k,
    percentile as percentile,
    reduce_epochs as reduce_epochs,
    stderr as stderr,
)
from ._prompt import (
    DEFAULT_TEMPLATE as DEFAULT_TEMPLATE,
    NO_TEMPLATE as NO_TEMPLATE,
    TemplateError as TemplateError,
    check_template as check_template,
    render_prompt as render_prompt,
)
from ._rescore import RescoreError as RescoreError, read_result_lines as read_result_lines, rescore as rescore
from ._score import (
    EvalItem as EvalItem,
    EvalResult as EvalResult,
    ItemLike as ItemLike,
    Score as Score,
    ScoreValueError as ScoreValueError,
    score_record as score_record,
    targets_of as targets_of,
)
from ._tally import (
    EvalPlan as EvalPlan,
    EvalTally as EvalTally,
    evaluated as evaluated,
    line_fields as line_fields,
    make_plan as make_plan,
    scorer_specs as scorer_specs,
    sha256_file as sha256_file,
)
from ._warnings import excluded_warnings as excluded_warnings, failure_warnings as failure_warnings
from ._workers import (
    SCORER_TIMEOUT as SCORER_TIMEOUT,
    SCORER_WORKERS as SCORER_WORKERS,
    ScorerCallError as ScorerCallError,
    ScorerWorkers as ScorerWorkers,
    needs_workers as needs_workers,
    open_scorer_workers as open_scorer_workers,
)
from ..results import Usage as Usage
from ._usage import (
    Price as Price,
    Prices as Prices,
    PricesError as PricesError,
    events_usage as events_usage,
    load_prices as load_prices,
    parse_prices as parse_prices,
    step_usage as step_usage,
    turn_usage as turn_usage,
)

__all__ = _publish(globals())
