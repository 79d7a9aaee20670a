"""The facts the passes require and ensure, as Conditions on the compile state.

Each is a cheap walk over the graph or the plan that returns None when the fact holds, else a
line naming the first culprit. pyge/compiler.py attaches them to its passes; once a pass has
ensured one it must hold for the rest of the pipeline, which the InvariantInstrument checks,
together with the two registered here as invariants: WELL_FORMED (use lists and producers
agree, from clone on) and PLAN_VERIFIES (the full verifier, from insert_events on).
"""
from __future__ import annotations

from ..errors import GraphCycleError, VerificationError
from ..ir.graph import Graph, Node
from ..plan.collectives import META_KEY
from ..plan.plan import LAUNCH, RECORD, WAIT
from .graph.check_ops import unsupported_ops
from .memory.planner import is_planned
from .pipeline import CompileState, Condition, register_invariant
from .verify.checks import verify_plan


def _nodes(graph: Graph):
    for g in graph.all_graphs():
        for n in g.nodes:
            yield g, n


def _owned(st: CompileState) -> str | None:
    if st.source is not None and st.graph is st.source:
        return f"graph {st.graph.name!r} is the caller's, not the compiler's copy"
    return None


def _acyclic(st: CompileState) -> str | None:
    for g in st.graph.all_graphs():
        try:
            g.topological_sort()
        except GraphCycleError as err:
            return str(err)
    return None


def _node_problem(g: Graph, n: Node, uses: dict[int, set]) -> str | None:
    """What is wrong with `n`'s links, if anything. `uses` caches each value's use set."""
    if n.graph is not g:
        return f"node {n.name!r} is listed in graph {g.name!r} but belongs to another"
    inputs = n.inputs
    for j, v in enumerate(inputs):
        if v is None:
            continue
        known = uses.get(id(v))
        if known is None:
            known = uses[id(v)] = {(id(m), k) for m, k in v.uses}
        if (id(n), j) not in known:
            return f"node {n.name!r} reads {v.name!r} (input {j}), which does not list that use"
    for j, o in enumerate(n.outputs):
        if o.producer is not n or o.index != j:
            return f"output {j} of node {n.name!r} ({o.name!r}) names another producer"
        for m, k in o.uses:
            if m.graph is None or k >= len(m.inputs) or m.inputs[k] is not o:
                return f"value {o.name!r} lists a use by {m.name!r} (input {k}) that is gone"
    return None


def _well_formed(st: CompileState) -> str | None:
    """Use lists and producers agree with the nodes' inputs and outputs; names are unique
    within each graph; the root graph's outputs are defined. Linear in the graph."""
    uses: dict[int, set] = {}
    for g in st.graph.all_graphs():
        names: set[str] = set()
        for n in g.nodes:
            if n.name in names:
                return f"graph {g.name!r} has two nodes named {n.name!r}"
            names.add(n.name)
            msg = _node_problem(g, n, uses)
            if msg is not None:
                return f"graph {g.name!r}: {msg}"
        if g.parent is None:
            defined = {id(v) for v in g.values().values()}
            for v in g.outputs:
                if id(v) not in defined:
                    return f"graph {g.name!r}: output {v.name!r} is defined nowhere"
    return None


# Left by the check_ops pass when it found every operator supported, for its postcondition:
# taken once (the next check of OPS_SUPPORTED), and only while the graph's version stands.
OPS_CHECKED = "ops_checked"


def _supported(st: CompileState) -> str | None:
    hit = st.graph._derived.pop(OPS_CHECKED, None)
    if hit is not None and hit[0] == st.graph._version:
        return None
    missing = unsupported_ops(st.graph)
    if missing:
        op, node = next(iter(missing.items()))
        return f"operator {op} (node {node!r}) has no kernel"
    return None


def _engines(st: CompileState) -> str | None:
    for g, n in _nodes(st.graph):
        if not isinstance(n.engine, str) or not n.engine:
            return f"node {n.name!r} ({n.op_type}) of graph {g.name!r} has no engine"
    return None


def _streams(st: CompileState) -> str | None:
    for g, n in _nodes(st.graph):
        if not isinstance(n.stream_id, int) or n.stream_id < 0:
            return f"node {n.name!r} ({n.op_type}) of graph {g.name!r} has stream {n.stream_id!r}"
    return None


def _dense(st: CompileState) -> str | None:
    used = sorted({n.stream_id for _, n in _nodes(st.graph)})
    if used != list(range(len(used))):
        return f"stream ids {used[:8]} are not 0..{len(used) - 1}"
    if st.num_streams != max(len(used), 1):
        return f"the state counts {st.num_streams} streams, the graph uses {len(used)}"
    return None


def _in_range(st: CompileState) -> str | None:
    for n in st.graph.nodes:
        if not 0 <= n.stream_id < max(st.num_streams, 1):
            return f"node {n.name!r} has stream {n.stream_id}, outside 0..{st.num_streams - 1}"
    return None


def _plan_built(st: CompileState) -> str | None:
    plan = st.plan
    if plan is None:
        return "there is no plan"
    if len(plan.streams) != st.num_streams:
        return f"the plan has {len(plan.streams)} streams, the graph {st.num_streams}"
    launched = [0] * len(plan.nodes)
    for s, steps in enumerate(plan.streams):
        for st_ in steps:
            if st_.kind == LAUNCH:
                if not 0 <= st_.arg < len(plan.nodes) or plan.nodes[st_.arg].stream != s:
                    return f"stream {s} launches node #{st_.arg}, which is not one of its nodes"
                launched[st_.arg] += 1
    for pn, c in zip(plan.nodes, launched):
        if c != 1:
            return f"node {pn.name!r} is launched {c} times"
    return None


def _no_events(st: CompileState) -> str | None:
    plan = st.plan
    if plan is not None and (plan.events or any(x.kind != LAUNCH for s in plan.streams for x in s)):
        return f"plan {plan.graph_name!r} already has {len(plan.events)} events"
    return None


def _events_placed(st: CompileState) -> str | None:
    plan = st.plan
    if plan is None:
        return "there is no plan"
    records = [0] * len(plan.events)
    waits = [0] * len(plan.events)
    for s, steps in enumerate(plan.streams):
        for x in steps:
            if x.kind == LAUNCH:
                continue
            if not 0 <= x.arg < len(plan.events):
                return f"stream {s} has a step for event #{x.arg}, which does not exist"
            e = plan.events[x.arg]
            if x.kind == RECORD and e.src_stream == s:
                records[x.arg] += 1
            elif x.kind == WAIT and e.dst_stream == s:
                waits[x.arg] += 1
            else:
                return f"event {e} has a step on stream {s}"
    for k, e in enumerate(plan.events):
        if e.index != k or records[k] != 1 or waits[k] < 1:
            return f"event {e} (#{k}, index {e.index}) has {records[k]} RECORDs, {waits[k]} WAITs"
    return None


def _event_ids(st: CompileState) -> str | None:
    ids = {e.event_id for e in st.plan.events} if st.plan is not None else set()
    if ids != set(range(len(ids))):
        return f"physical event ids {sorted(ids)[:8]} are not 0..{len(ids) - 1}"
    return None


def _memory(st: CompileState) -> str | None:
    plan = st.plan
    if plan is None:
        return "there is no plan"
    mem = plan.memory
    for v in plan.values:
        if v.buffer < 0:
            if is_planned(v):
                return f"value {v.name!r} has a static size but no buffer"
            continue
        if not v.buffer < len(mem.buffers):
            return f"value {v.name!r} has buffer {v.buffer}, of {len(mem.buffers)}"
        b = mem.buffers[v.buffer]
        if v.nbytes > b.size or b.offset + v.nbytes > mem.peak_bytes:
            return f"value {v.name!r} ({v.nbytes} B) does not fit buffer {b.index}"
    return None


def _collectives_chained(st: CompileState) -> str | None:
    plan = st.plan
    if plan is None:
        return "there is no plan"
    chain = plan.meta.get(META_KEY)
    if not isinstance(chain, list):
        return f"plan {plan.graph_name!r} does not list its collectives"
    for u, v in zip(chain, chain[1:]):
        a, b = plan.nodes[u], plan.nodes[v]
        if a.stream != b.stream and u not in b.control_preds:
            return f"collectives {a.name!r}@s{a.stream} and {b.name!r}@s{b.stream} are not chained"
    return None


def _verifies(st: CompileState) -> str | None:
    try:
        verify_plan(st.plan)
    except VerificationError as err:
        return str(err)
    return None


OWNED = Condition("owned", _owned)
ACYCLIC = Condition("acyclic", _acyclic)
WELL_FORMED = Condition("well_formed", _well_formed)
OPS_SUPPORTED = Condition("ops_supported", _supported)
ENGINES_ASSIGNED = Condition("engines_assigned", _engines)
STREAMS_ASSIGNED = Condition("streams_assigned", _streams)
DENSE_STREAMS = Condition("dense_streams", _dense)
STREAMS_IN_RANGE = Condition("streams_in_range", _in_range)
PLAN_BUILT = Condition("plan_built", _plan_built)
NO_EVENTS_YET = Condition("no_events_yet", _no_events)
EVENTS_PLACED = Condition("events_placed", _events_placed)
EVENT_IDS_DENSE = Condition("event_ids_dense", _event_ids)
MEMORY_PLANNED = Condition("memory_planned", _memory)
COLLECTIVES_CHAINED = Condition("collectives_chained", _collectives_chained)
PLAN_VERIFIES = Condition("plan_verifies", _verifies)

# Too costly for every compile, and true by construction outside a bug: checked by the
# InvariantInstrument only (the IR's setters keep use lists; the verifier is pass `verify`).
register_invariant("clone", WELL_FORMED)
register_invariant("insert_events", PLAN_VERIFIES)
