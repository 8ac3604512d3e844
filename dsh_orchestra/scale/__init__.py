"""Scale-out: one batch across machines on Ray, with the same results as on one machine.

``run_batch(dataset, out, spec, options, executor=RayExecutor(actors=4))``: each Ray actor
hosts a runtime pool on a trio thread of its own and runs the attempts the batch's run loop
hands it; the driver is the only writer of the results (docs/scale-out.md).
Ray is an optional extra (``pip install 'dsh-orchestra[ray]'``): importing this package does
not import it; opening a ``RayExecutor`` does.
"""

from .._public import publish as _publish
from ._host import HostConfig as HostConfig, HostFailedError as HostFailedError, HostInfo as HostInfo, PoolHost as PoolHost
from ._portable import ActorSpec as ActorSpec, RemoteError as RemoteError, split_spec as split_spec
from ._ray import RayExecutor as RayExecutor, ScaleError as ScaleError, run_batch_ray as run_batch_ray

__all__ = _publish(globals())
