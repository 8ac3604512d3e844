"""Scale-out: one batch across machines on Ray, with the same results as on one machine.

A Ray actor hosts a runtime pool on a trio thread of its own; the driver hands items out,
takes each result line back and is the only writer of the results (docs/scale-out.md).
Ray is an optional extra (``pip install 'dsh-orchestra[ray]'``): importing this package does
not import it; ``run_batch_ray`` does, when called.
"""

from ._dispatch import ACTOR_LOST as ACTOR_LOST, Ledger as Ledger
from ._host import HostConfig as HostConfig, HostFailedError as HostFailedError, HostInfo as HostInfo, PoolHost as PoolHost
from ._local import LocalRay as LocalRay, LocalRayError as LocalRayError
from ._portable import ActorSpec as ActorSpec, RemoteError as RemoteError, split_spec as split_spec
from ._ray import (
    RAY_MISSING as RAY_MISSING,
    RayConnection as RayConnection,
    ScaleError as ScaleError,
    connect as connect,
    run_batch_ray as run_batch_ray,
)

__all__ = [
    "ACTOR_LOST", "RAY_MISSING", "ActorSpec", "HostConfig", "HostFailedError", "HostInfo", "Ledger", "LocalRay",
    "LocalRayError", "PoolHost", "RayConnection", "RemoteError", "ScaleError", "connect", "run_batch_ray", "split_spec",
]
