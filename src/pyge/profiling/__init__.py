"""Profiling a compiled model: per-operator start and end on each logical stream.

    prof = model.profile(feeds, runs=10)      # -> pyge.profiling.profile_model
    prof.save_trace("trace.json"); prof.plot("timeline.png"); print(prof.summary())

How times are taken:
    cpu                 hooks around each node on the stream's worker thread read
                        time.perf_counter_ns() into that stream's own buffer (no lock)
    cuda, eager         a pair of CUDA timing events recorded on the node's stream around it
    cuda, graph replay  the kernels of the replays, read through torch.profiler (see cuda.py)
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from ..errors import OptionError
from .profile import Profile
from .records import EventRecord, OpRecord, RunRecord, derive_events

log = logging.getLogger(__name__)


def _check_counts(runs: Any, warmup: Any) -> tuple[int, int]:
    try:
        r, w = int(runs), int(warmup)
        # int() would truncate 1.5 to 1 and take True for 1: not counts anyone meant
        if isinstance(runs, (bool, float)) or isinstance(warmup, (bool, float)):
            if isinstance(runs, bool) or isinstance(warmup, bool) or r != runs or w != warmup:
                raise ValueError
    except (TypeError, ValueError, OverflowError) as err:
        raise OptionError(f"profile: runs={runs!r} and warmup={warmup!r} must be integers") from err
    if r < 1 or w < 0:
        raise OptionError(f"profile: runs must be >= 1 and warmup >= 0, got runs={r}, warmup={w}")
    return r, w


def _plan_of(model):
    """The plan whose node and stream numbers the records use: a dynamic-shape model's flat
    plan (every part, streams numbered across them: plan/flatten.py), else the model's."""
    return getattr(model, "flat_plan", None) or model.plan


def profile_model(model, feeds: Mapping[str, Any], runs: int = 10, warmup: int = 1) -> Profile:
    """Run `model` warmup + runs times and record each operator's start and end per stream."""
    runs, warmup = _check_counts(runs, warmup)
    plan = _plan_of(model)
    executor = model.executor
    if str(model.device).startswith("cuda"):
        from .cuda import profile_cuda
        return profile_cuda(model, executor, feeds, runs, warmup)
    from .hooks import run_cpu
    hooks, run_records, t0 = run_cpu(executor, feeds, runs, warmup, plan.num_streams)
    records = hooks.op_records(plan, t0)
    events = derive_events(plan, records, hooks.hooked_events(t0))
    name = getattr(executor, "name", type(executor).__name__)
    mode = {"cpu": "cpu threads", "sequential": "cpu sequential"}.get(name, f"cpu {name}")
    log.debug("profiled %s: %d runs, %d op records", plan.graph_name, runs, len(records))
    return Profile(plan.graph_name, str(model.device), plan.num_streams, plan, records, events,
                  run_records, mode=mode)


__all__ = ["profile_model", "Profile", "OpRecord", "EventRecord", "RunRecord"]
