"""Scale-out: one batch across machines on Ray, with the same results as on one machine.

``run_batch(dataset, out, spec, options, executor=RayExecutor(actors=4))``: each Ray actor
hosts a runtime pool on a trio thread of its own and runs the attempts the batch's run loop
hands it; the driver is the only writer of the results (docs/scale-out.md).
Ray is an optional extra (``pip install 'dsh-orchestra[ray]'``): importing this package does
not import it; opening a ``RayExecutor`` does.
"""

from ..batch import PLACE_LOST as ACTOR_LOST
from ._host import HostConfig as HostConfig, HostFailedError as HostFailedError, HostInfo as HostInfo, PoolHost as PoolHost
from ._local import LocalRay as LocalRay, LocalRayError as LocalRayError
from ._portable import ActorSpec as ActorSpec, RemoteError as RemoteError, split_spec as split_spec
from ._ray import (
    RAY_MISSING as RAY_MISSING,
    RayConnection as RayConnection,
    RayExecutor as RayExecutor,
    RayRunner as RayRunner,
    ScaleError as ScaleError,
    connect as connect,
    run_batch_ray as run_batch_ray,
)

__all__ = [
    "ACTOR_LOST", "RAY_MISSING", "ActorSpec", "HostConfig", "HostFailedError", "HostInfo", "LocalRay",
    "LocalRayError", "PoolHost", "RayConnection", "RayExecutor", "RayRunner", "RemoteError", "ScaleError", "connect",
    "run_batch_ray", "split_spec",
]
