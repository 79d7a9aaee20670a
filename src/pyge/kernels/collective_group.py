"""The torch.distributed process group behind a model's collectives (GE's HCCL engine).

pyge does not communicate by itself: its collective kernels (kernels/collective.py) call
torch.distributed on the *default* process group.

- If the caller has initialised one (``torch.distributed.init_process_group``), that group
  is used as it is, with its backend and its own timeout.
- Otherwise pyge initialises it from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT): gloo for the cpu, nccl for cuda, with ``pyge.collectiveTimeout`` as the
  group's timeout, so that the backend itself also gives up on a lost peer.
- Without either, compiling (or loading) a model with a collective fails with one line
  saying how to launch.
- A group pyge made is destroyed at exit (atexit); a caller's group is the caller's.

A collective that fails or times out leaves its group unusable: the ranks no longer agree on
which collective comes next, and on gloo the lost one is still pending in the group. The
group is marked broken, so that later runs fail at once, naming the first failure, instead
of hanging or mixing up results; the caller destroys it and initialises a fresh one.

torch.distributed is imported only when a model has collectives. The module sits among the
kernels, which may import only errors, ir and each other (tests/test_layering.py); the
compiler's collectives pass and the CUDA executor's capture decision ask it too.
"""
from __future__ import annotations

import atexit
import datetime
import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any

from ..errors import DistributedError

log = logging.getLogger(__name__)

ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCH_HINT = ("launch every rank with `torchrun --nproc-per-node N ...` (it sets "
               + ", ".join(ENV_VARS) + "), or call torch.distributed.init_process_group() before compiling")
# NCCL collectives may be captured into a CUDA graph from this version on; torch refuses the
# capture below it (ProcessGroupNCCL's errorIfCapturingNonCapturableNCCL).
NCCL_CAPTURE_MIN = (2, 9, 6)

_broken: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_initialised_by_pyge: "weakref.WeakSet[Any]" = weakref.WeakSet()


@dataclass(frozen=True)
class GroupInfo:
    """The default group as a collective kernel sees it."""
    group: Any            # torch.distributed.ProcessGroup
    rank: int
    world_size: int
    backend: str          # the backend that serves the model's device type ("gloo", "nccl", ...)

    def where(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def device_type(device: Any) -> str:
    return "cuda" if str(device).startswith("cuda") else "cpu"


def default_group(device: Any, timeout_s: float, who: str) -> GroupInfo:
    """The default process group for collectives on `device`, initialised from torchrun's
    environment if the caller has not initialised one. `who` names the node that needs it
    (for the error message)."""
    dist = _dist(who)
    if not dist.is_initialized():
        _init_from_env(dist, device, timeout_s, who)
    pg = dist.group.WORLD
    why = _broken.get(pg)
    if why is not None:
        raise DistributedError(f"{who}: the default process group is broken by an earlier failure "
                               f"({why}); destroy it (torch.distributed.destroy_process_group()) "
                               "and initialise a fresh one")
    return GroupInfo(pg, dist.get_rank(pg), dist.get_world_size(pg), _backend_for(dist, pg, device, who))


def _dist(who: str):
    import torch.distributed as dist
    if not dist.is_available():
        raise DistributedError(f"{who} needs torch.distributed, which this torch build lacks")
    return dist


def _init_from_env(dist, device: Any, timeout_s: float, who: str) -> None:
    missing = [k for k in ENV_VARS if not os.environ.get(k)]
    if missing:
        raise DistributedError(f"{who} needs a torch.distributed process group: none is initialised "
                               f"and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
                               f"not set; {LAUNCH_HINT}")
    kind = device_type(device)
    backend = "nccl" if kind == "cuda" else "gloo"
    if kind == "cuda":
        _pick_local_gpu(device)
    try:
        dist.init_process_group(backend=backend, init_method="env://",
                                timeout=datetime.timedelta(seconds=timeout_s))
    except Exception as err:  # noqa: BLE001 - a refused rendezvous, a missing backend, ...
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DistributedError(f"{who}: initialising a {backend} process group from the environment "
                               f"(RANK={os.environ['RANK']}, WORLD_SIZE={os.environ['WORLD_SIZE']}, "
                               f"MASTER_ADDR={os.environ['MASTER_ADDR']}, MASTER_PORT={os.environ['MASTER_PORT']}) "
                               f"failed: {type(err).__name__}: {text}") from err
    _initialised_by_pyge.add(dist.group.WORLD)
    atexit.register(_destroy_own_group)
    log.info("initialised a %s process group from the environment: rank %d of %d", backend,
             dist.get_rank(), dist.get_world_size())


def _destroy_own_group() -> None:
    """At exit, destroy the group pyge made (a caller's group is the caller's to destroy).
    This does not join gloo's worker threads (only the group's C++ destructor does); that a
    worker holds no tensor of pyge's by then is the kernels' doing ("Releasing" in
    collective.py)."""
    import torch.distributed as dist
    if dist.is_initialized() and dist.group.WORLD in _initialised_by_pyge:
        try:
            dist.destroy_process_group()
        except Exception as err:  # noqa: BLE001 - exiting anyway; say why the group stayed
            log.warning("destroying the process group at exit failed: %s", err)


def _pick_local_gpu(device: Any) -> None:
    """torchrun's convention: rank LOCAL_RANK of a node uses GPU LOCAL_RANK (only for a plain
    "cuda" device, and only where that GPU exists)."""
    import torch
    local = os.environ.get("LOCAL_RANK", "")
    if str(device) == "cuda" and local.isdigit() and int(local) < torch.cuda.device_count():
        torch.cuda.set_device(int(local))


def _backend_for(dist, pg, device: Any, who: str) -> str:
    """The name of the backend that serves `device`'s tensors in `pg`; refuses a group that
    has none (an nccl-only group for a cpu model)."""
    kind = device_type(device)
    spec = str(dist.get_backend(pg)).lower()
    if ":" in spec:        # "cpu:gloo,cuda:nccl"
        per_device = dict(part.split(":", 1) for part in spec.split(",") if ":" in part)
        name = per_device.get(kind)
    else:
        capable = dist.Backend.backend_capability.get(spec)
        name = spec if capable is None or kind in capable else None
    if name is None:
        raise DistributedError(f"{who}: the default process group's backend ({spec}) cannot run "
                               f"collectives on {kind} tensors; initialise it with "
                               f"{'nccl' if kind == 'cuda' else 'gloo'} for a {kind} model")
    return name


def mark_broken(group: Any, why: str) -> None:
    """Remember that `group` can no longer be trusted (see the module docstring)."""
    _broken.setdefault(group, why)


def is_broken(group: Any) -> bool:
    return group in _broken


def initialised_by_pyge(group: Any) -> bool:
    return group in _initialised_by_pyge


def capture_blocker(backend: str) -> str | None:
    """Why collectives on `backend` cannot be captured into a CUDA graph (None: they can).

    As torch decides it: NCCL collectives are capturable from NCCL 2.9.6 on (below it
    ProcessGroupNCCL raises when the stream is capturing); every other backend does its work
    on the host (gloo copies through host memory), which a graph replay would not repeat.
    """
    if backend != "nccl":
        return f"collectives run on backend {backend}, which works on the host: not capturable"
    import torch
    try:
        version = tuple(torch.cuda.nccl.version())
    except Exception as err:  # noqa: BLE001 - no NCCL in this build
        return f"NCCL version unknown ({type(err).__name__}): collectives not captured"
    if version[:3] < NCCL_CAPTURE_MIN:
        return (f"NCCL {'.'.join(map(str, version))} cannot capture collectives "
                f"(needs {'.'.join(map(str, NCCL_CAPTURE_MIN))})")
    return None



def cuda_capture_blocker() -> str | None:
    """capture_blocker for the backend that serves cuda tensors in the default group (None
    when no group is initialised: the kernels' own set-up then fails with the launch hint)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return capture_blocker(_backend_for(dist, dist.group.WORLD, "cuda", "a CUDA graph capture"))
