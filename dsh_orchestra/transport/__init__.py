"""JSON-RPC 2.0 over a trio stream pair: one reader, pending requests, handlers, fan-out.

Knows nothing about what methods mean.
"""

from .._public import publish as _publish
from ._connection import (
    Connection as Connection,
    ConnectionStatistics as ConnectionStatistics,
    NoReply as NoReply,
    RpcError as RpcError,
)
from ._notification import Notification as Notification, NotificationFilter as NotificationFilter
from ._subscription import (
    DEFAULT_CAPACITY as DEFAULT_CAPACITY,
    Lender as Lender,
    Subscription as Subscription,
)

__all__ = _publish(globals())
