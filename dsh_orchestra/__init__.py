"""dsh_orchestra: trio-native orchestration for DeepSeek Harness runtimes."""

from ._version import __version__ as __version__
from .protocol import (
    FrameTooLargeError as FrameTooLargeError,
    JsonRpcResponseError as JsonRpcResponseError,
    MethodNotSupportedError as MethodNotSupportedError,
    OrchestraError as OrchestraError,
    RequestTimeoutError as RequestTimeoutError,
    RuntimeExitedError as RuntimeExitedError,
    RuntimeStartError as RuntimeStartError,
    SdkProtocolError as SdkProtocolError,
    SubscriberOverflowError as SubscriberOverflowError,
    TransportClosedError as TransportClosedError,
)
from .transport import Connection as Connection, Notification as Notification, Subscription as Subscription

__all__ = [
    "__version__",
    "Connection",
    "FrameTooLargeError",
    "JsonRpcResponseError",
    "MethodNotSupportedError",
    "Notification",
    "OrchestraError",
    "RequestTimeoutError",
    "RuntimeExitedError",
    "RuntimeStartError",
    "SdkProtocolError",
    "SubscriberOverflowError",
    "Subscription",
    "TransportClosedError",
]
