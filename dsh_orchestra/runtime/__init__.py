"""Runtime layer: RuntimeSpec, the runtime actor (process, handshake, close ladder) and the
approval relay (its socket server, ``ApprovalRelay``, beside its plugin's files in ``relay/``).

Knows nothing about sessions, pools or workflows.
"""

from .._public import publish as _publish
from .._redact import redact as redact
from ._actor import RuntimeActor as RuntimeActor, StderrTail as StderrTail
from ._relay import ApprovalRelay as ApprovalRelay, relay_warnings as relay_warnings
from ._sandbox import SANDBOX_MODES as SANDBOX_MODES, bwrap_problem as bwrap_problem
from ._spec import (
    APPROVAL_RELAY_MODES as APPROVAL_RELAY_MODES,
    DEFAULT_MODEL as DEFAULT_MODEL,
    DEFAULT_PROVIDER as DEFAULT_PROVIDER,
    Connector as Connector,
    RuntimeSpec as RuntimeSpec,
    bundled_dsh_command as bundled_dsh_command,
)

__all__ = _publish(globals())
