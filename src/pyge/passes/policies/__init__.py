"""Built-in stream policies (the `stream_policy` pass), selected by option.

GE's built-in chain (allocate_streams) has already given every node a stream; a policy then re-places
the root graph's direct nodes (subgraph nodes follow their parent; leave them alone):

    pyge.streamPolicy  ge              keep GE's chain (nothing runs here unless a file is given)
                       critical_path   longest cost path on stream 0, the rest spread (critical_path.py)
                       min_streams     Nimble: minimum chain cover, merged to the budget (chains.py)
                       list_schedule   HEFT on per-operator costs (list_schedule.py)
    pyge.maxStreams    the stream budget k of a policy (ids 0..k-1, renumbered later anyway)
    pyge.costFile      measured per-operator costs for the policies (written by `pyge tune`)
    pyge.policyFile    a saved node -> stream map, applied after the policy (policy_file.py)

Every policy is deterministic, keeps labelled and independent-engine nodes on the streams
GE gave them (and keeps other nodes off those streams), and lets skip-engine nodes follow a
neighbour. `defaults.default_policy(device)` says what pyge does when no stream option is set.
"""
from __future__ import annotations

import logging
from typing import Callable

from ...ir.graph import Graph
from ._dag import CostTable, cost_table, load_costs
from .chains import assign_min_streams
from .critical_path import assign_critical_path
from .list_schedule import assign_list_schedule
from .policy_file import apply_policy_file, read_policy_file, write_policy_file

log = logging.getLogger(__name__)

# policy name -> fn(graph, k, cost table) -> streams used; "ge" is absent: it changes nothing.
POLICIES: dict[str, Callable[[Graph, int, CostTable], int]] = {
    "critical_path": assign_critical_path,
    "min_streams": assign_min_streams,
    "list_schedule": assign_list_schedule,
}


def apply_policy(graph: Graph, options) -> None:
    """Run the policy named by `pyge.streamPolicy`, then the `pyge.policyFile`, on `graph`."""
    name = options["pyge.streamPolicy"]
    fn = POLICIES.get(name)
    if fn is not None:
        used = fn(graph, options["pyge.maxStreams"], cost_table(options))
        log.info("stream policy %s (maxStreams %d): %d stream(s)", name, options["pyge.maxStreams"], used)
    path = options["pyge.policyFile"]
    if path:
        apply_policy_file(graph, path)


__all__ = ["apply_policy", "POLICIES", "CostTable", "load_costs", "read_policy_file",
           "write_policy_file", "apply_policy_file"]
