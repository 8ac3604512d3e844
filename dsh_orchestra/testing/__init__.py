"""Test doubles: the simulated runtime, the scripted model server, scenario scripts.

The simulator implements the newest protocol (including what the real runtime 0.2.1-rc.2
lacks) and runs in-process over memory streams or as ``python -m dsh_orchestra.testing sim``.
The scripted model server lets the real runtime run offline. No library module imports this.
"""

from .._public import publish as _publish
from ._fake_model import (
    FakeModelServer as FakeModelServer,
    fake_model_main as fake_model_main,
    open_fake_model as open_fake_model,
)
from ._script import (
    DEFAULT_SCRIPT as DEFAULT_SCRIPT,
    ApprovalSpec as ApprovalSpec,
    Behaviour as Behaviour,
    EventsSpec as EventsSpec,
    QuestionSpec as QuestionSpec,
    Rule as Rule,
    Script as Script,
    ScriptError as ScriptError,
    SpawnSpec as SpawnSpec,
    ToolCallSpec as ToolCallSpec,
    load_script as load_script,
    parse_script as parse_script,
)
from ._sim_agent import SimOptions as SimOptions
from ._sim_main import sim_main as sim_main
from ._simulator import (
    SimulatedRuntime as SimulatedRuntime,
    open_simulator as open_simulator,
    open_simulator_stream as open_simulator_stream,
)
from ._specs import in_process_spec as in_process_spec

__all__ = _publish(globals())
