"""Tuning: measured per-operator costs, a simulator of plans on a shared device, and the
tuner behind `pyge tune` (try policies x stream counts, keep the fastest measured plan).

    costs.py      measure_costs / static_costs -> OpCosts (a cost file for pyge.costFile)
    simulator.py  simulate(plan, costs) -> SimResult; critical_path_bound(plan, costs)
    tuner.py      tune(graph, device, feeds) -> TuneResult (.table(), .write(policy.json))
The `pyge tune` command is pyge/cli/tune.py.
"""
from __future__ import annotations

from .costs import OpCosts, measure_costs, random_feeds, static_costs
from .simulator import DeviceModel, SimResult, critical_path_bound, simulate
from .tuner import TuneResult, tune

__all__ = ["OpCosts", "measure_costs", "static_costs", "random_feeds", "DeviceModel", "SimResult",
           "simulate", "critical_path_bound", "tune", "TuneResult"]
