"""Runtime layer: RuntimeSpec and the runtime actor (process, handshake, close ladder).

Knows nothing about sessions, pools or workflows.
"""

from .._public import publish as _publish
from .._redact import redact as redact
from ._actor import RuntimeActor as RuntimeActor, StderrTail as StderrTail
from ._spec import (
    DEFAULT_MODEL as DEFAULT_MODEL,
    DEFAULT_PROVIDER as DEFAULT_PROVIDER,
    Connector as Connector,
    RuntimeSpec as RuntimeSpec,
    bundled_dsh_command as bundled_dsh_command,
)

__all__ = _publish(globals())
