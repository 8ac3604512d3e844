"""The model gateway: every runtime's model calls through one loopback service of the run.

Token auth (the real key stays here), adaptive concurrency with retries of rate-limited
calls, a response cache with record/replay, and counters (docs/gateway.md).
"""

from .._public import publish as _publish
from ._budget import CallBudget as CallBudget, PerMtok as PerMtok, call_cost as call_cost
from ._cache import CACHE_FILE_NAME as CACHE_FILE_NAME, CacheError as CacheError, ResponseCache as ResponseCache, cache_key as cache_key
from ._limiter import AdaptiveLimiter as AdaptiveLimiter
from ._options import CACHE_EPOCHS as CACHE_EPOCHS, CACHE_MODES as CACHE_MODES, DEFAULT_GATEWAY as DEFAULT_GATEWAY, DEFAULT_UPSTREAM as DEFAULT_UPSTREAM, GatewayOptions as GatewayOptions, parse_rate as parse_rate
from ._quota import QuotaGrant as QuotaGrant, QuotaLedger as QuotaLedger, QuotaReport as QuotaReport, fair_shares as fair_shares, follow_quota as follow_quota
from ._route import api_key_of as api_key_of, gateway_for as gateway_for, needs_gateway as needs_gateway, open_gateway as open_gateway, routed_to as routed_to, upstream_of as upstream_of
from ._server import JUDGE_SESSION_PREFIX as JUDGE_SESSION_PREFIX, CallStats as CallStats, Gateway as Gateway, limiter_for as limiter_for

__all__ = _publish(globals())
