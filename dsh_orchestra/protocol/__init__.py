"""Sans-I/O protocol core: wire types, converter, framing, frame classification, errors.

Imports no trio and does no I/O.
"""

from .._public import publish as _publish
from ._content import (
    AttachedImageBlock as AttachedImageBlock,
    ContentBlock as ContentBlock,
    ImageAttachment as ImageAttachment,
    ImageBlock as ImageBlock,
    ReasoningBlock as ReasoningBlock,
    TextBlock as TextBlock,
    ToolCallBlock as ToolCallBlock,
    UnknownBlock as UnknownBlock,
    text_of as text_of,
)
from ._converter import (
    CONVERTER as CONVERTER,
    camel as camel,
    make_converter as make_converter,
    strict_scalars as strict_scalars,
    structure as structure,
    unstructure as unstructure,
)
from ._errors import (
    KNOWN_ERRORS as KNOWN_ERRORS,
    FrameTooLargeError as FrameTooLargeError,
    JsonRpcResponseError as JsonRpcResponseError,
    MethodNotSupportedError as MethodNotSupportedError,
    NotInitializedError as NotInitializedError,
    OrchestraError as OrchestraError,
    RequestTimeoutError as RequestTimeoutError,
    RuntimeExitedError as RuntimeExitedError,
    RuntimeStartError as RuntimeStartError,
    SdkProtocolError as SdkProtocolError,
    SessionAlreadyOpenError as SessionAlreadyOpenError,
    SessionExistsError as SessionExistsError,
    SessionNotFoundError as SessionNotFoundError,
    SessionOwnedError as SessionOwnedError,
    ShuttingDownError as ShuttingDownError,
    SubscriberOverflowError as SubscriberOverflowError,
    TransportClosedError as TransportClosedError,
    UnknownSessionError as UnknownSessionError,
    known_message as known_message,
    response_error as response_error,
)
from ._events import *  # noqa: F403  (the event vocabulary; see _events.__all__)
from ._framing import (
    CLOSED as CLOSED,
    DEFAULT_MAX_FRAME_SIZE as DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA as NEED_DATA,
    LineFramer as LineFramer,
    Need as Need,
    encode_frame as encode_frame,
)
from ._jsonrpc import (
    INTERNAL_ERROR as INTERNAL_ERROR,
    INVALID_PARAMS as INVALID_PARAMS,
    INVALID_REQUEST as INVALID_REQUEST,
    METHOD_NOT_FOUND as METHOD_NOT_FOUND,
    PARSE_ERROR as PARSE_ERROR,
    ErrorObject as ErrorObject,
    FrameKind as FrameKind,
    INVALID as INVALID,
    NOTIFICATION as NOTIFICATION,
    REQUEST as REQUEST,
    RESPONSE as RESPONSE,
    JsonObject as JsonObject,
    RequestId as RequestId,
    classify as classify,
    error_frame as error_frame,
    error_of as error_of,
    notification_frame as notification_frame,
    params_of as params_of,
    request_frame as request_frame,
    result_frame as result_frame,
)
from ._routing import (
    CHILD_SESSION_ID as CHILD_SESSION_ID,
    EDGE_METHODS as EDGE_METHODS,
    EVENT as EVENT,
    PARENT_SESSION_ID as PARENT_SESSION_ID,
    SESSION_ID as SESSION_ID,
    child_of as child_of,
    event_json as event_json,
    parent_of as parent_of,
    routing_key as routing_key,
    session_of as session_of,
)
from ._wire import *  # noqa: F403  (method constants and params/result classes)

__all__ = _publish(globals())
