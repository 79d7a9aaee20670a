"""A loaded .pgm plan is not trusted: it must be the plan of the graph it travels with.

The checksum only proves that the bytes are those written, not by whom: anyone can write
a file and checksum it. So the loader (modelfile.read_model) checks, in order,
1. every field's type and every index's range (a step, an event end, a buffer), so that a
   crafted file fails here rather than as an IndexError deep inside an executor;
2. that the plan is the graph's (check_against_graph): the plan holds exactly the graph's
   values, each with the graph's name, kind (tensor, sequence, optional), dtype, shape,
   producer and role (input, output, constant), its size what that dtype and shape take,
   and inside the arena; and each plan node is its graph node: same op type, stream and
   engine, the same inputs in the same order (absent ones absent, the subgraphs' outer
   reads after them), the same outputs, and every control edge of the graph. Executors
   run each graph node's kernel on the plan's values, so a plan that read `x` where its
   graph reads `v0` would compute something other than its graph;
3. verify(): no deadlock, every dependency and buffer reuse ordered across streams.
Every failure is a ModelFileError naming the node, value or event.
"""
from __future__ import annotations

from typing import Any

from .errors import ModelFileError
from .ir.graph import Graph
from .passes.verify.checks import verify_plan
from .plan.plan import LAUNCH, RECORD, WAIT, Plan, value_nbytes

_KINDS = ("tensor", "sequence", "optional")


def as_int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ModelFileError(f"{what} is not an integer: {x!r}")
    return x


def as_index(x: Any, n: int, what: str, lo: int = 0) -> int:
    i = as_int(x, what)
    if not lo <= i < n:
        raise ModelFileError(f"{what} is {i}, outside {lo}..{n - 1}")
    return i


def _list(x: Any, what: str) -> list:
    if not isinstance(x, list):
        raise ModelFileError(f"{what} is not a list")
    return x


def check_plan(plan: Plan, graph: Graph) -> None:
    """Raise ModelFileError unless `plan` is sound and is `graph`'s plan (module doc)."""
    _check_ranges(plan)
    check_against_graph(plan, graph)
    # Indices are sound and the plan is the graph's; now the ordering: no deadlock, every
    # dependency and buffer reuse ordered. A plan that would race or hang fails here.
    verify_plan(plan)


def _check_ranges(plan: Plan) -> None:
    V, N, S = len(plan.values), len(plan.nodes), len(plan.streams)
    for i, v in enumerate(plan.values):
        _check_record(v, i, "value")
        as_index(v.producer, N, f"producer of value {v.name!r}", lo=-1)
        as_index(v.buffer, len(plan.memory.buffers), f"buffer of value {v.name!r}", lo=-1)
    for i, n in enumerate(plan.nodes):
        _check_record(n, i, "node")
        as_index(n.stream, S, f"stream of node {n.name!r}")
        for what, lst, lo, size in (("input", n.inputs, -1, V), ("output", n.outputs, 0, V),
                                    ("control edge", n.control_preds, 0, N), ("release", n.free_after, 0, V)):
            for x in _list(lst, f"{what}s of node {n.name!r}"):
                as_index(x, size, f"{what} of node {n.name!r}", lo=lo)
    for k, e in enumerate(plan.events):
        _check_record(e, k, "event")
        as_int(e.event_id, f"id of event {k}")
        as_index(e.src_stream, S, f"source stream of event {k}")
        as_index(e.dst_stream, S, f"target stream of event {k}")
        as_index(e.src_node, N, f"source node of event {k}", lo=-1)
        as_index(e.dst_node, N, f"target node of event {k}", lo=-1)
    _check_steps(plan)
    for what, lst, size in (("input", plan.inputs, V), ("output", plan.outputs, V),
                            ("custom stream", plan.custom_streams, S)):
        for x in _list(lst, f"plan {what}s"):
            as_index(x, size, f"plan {what}")
    for b in plan.memory.buffers:
        for x in (b.index, b.offset, b.size, b.stream):
            as_index(x, 1 << 62, "buffer field")
    for x in (plan.memory.peak_bytes, plan.memory.no_reuse_bytes):
        as_index(x, 1 << 62, "memory plan size")
    if not isinstance(plan.options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in plan.options.items()):
        raise ModelFileError("the plan's options are not a table of strings")
    if not isinstance(plan.meta, dict):
        raise ModelFileError("the plan's metadata is not a table")


def _check_steps(plan: Plan) -> None:
    N, E = len(plan.nodes), len(plan.events)
    launched = [0] * N
    for s, steps in enumerate(plan.streams):
        for st in _list(steps, f"stream {s}"):
            if st.kind not in (LAUNCH, RECORD, WAIT):
                raise ModelFileError(f"stream {s} has a step of unknown kind {st.kind!r}")
            arg = as_index(st.arg, N if st.kind == LAUNCH else E, f"step argument on stream {s}")
            if st.kind == LAUNCH:
                if plan.nodes[arg].stream != s:
                    raise ModelFileError(f"node {plan.nodes[arg].name!r} is launched on stream {s}, "
                                         f"but planned on stream {plan.nodes[arg].stream}")
                launched[arg] += 1
    for i, c in enumerate(launched):
        if c != 1:
            raise ModelFileError(f"node {plan.nodes[i].name!r} is launched {c} times, not once")


def _check_record(rec: Any, i: int, what: str) -> None:
    if as_int(rec.index, f"{what} index") != i:
        raise ModelFileError(f"{what} {i} carries index {rec.index}")
    name = getattr(rec, "name", "")
    if not isinstance(name, str):
        raise ModelFileError(f"{what} {i} has a name that is not a string")


# ---------------------------------------------------------------------------------------
# the plan is the graph's


def check_against_graph(plan: Plan, graph: Graph) -> None:
    """The plan's values and nodes are exactly the graph's root values and nodes (module doc)."""
    names = [n.name for n in graph.nodes]
    if sorted(names) != sorted(n.name for n in plan.nodes) or len(set(names)) != len(names):
        raise ModelFileError("the plan's nodes do not match the graph's nodes")
    node_of = {pn.name: pn.index for pn in plan.nodes}
    _check_values(plan, graph, node_of)
    by_name = {n.name: n for n in graph.nodes}
    for pn in plan.nodes:
        _check_node(plan, pn, by_name[pn.name], node_of)
    for e in plan.events:
        for end, idx, stream in (("source", e.src_node, e.src_stream), ("target", e.dst_node, e.dst_stream)):
            name = e.src if end == "source" else e.dst
            if idx >= 0 and (plan.nodes[idx].name != name or plan.nodes[idx].stream != stream):
                raise ModelFileError(f"event {e.index}: its {end} {name!r} on stream {stream} is not "
                                     f"node {plan.nodes[idx].name!r} on stream {plan.nodes[idx].stream}")
    if [plan.values[i].name for i in plan.inputs] != [v.name for v in graph.inputs]:
        raise ModelFileError("the plan's inputs do not match the graph's inputs")
    if [plan.values[i].name for i in plan.outputs] != [v.name for v in graph.outputs]:
        raise ModelFileError("the plan's outputs do not match the graph's outputs")


def _check_values(plan: Plan, graph: Graph, node_of: dict[str, int]) -> None:
    gvals = graph.values()
    if len({v.name for v in plan.values}) != len(plan.values) or \
            {v.name for v in plan.values} != set(gvals):
        extra = sorted({v.name for v in plan.values} - set(gvals))[:3]
        raise ModelFileError("the plan's values are not the graph's values"
                             + (f" (the graph has no {', '.join(map(repr, extra))})" if extra else ""))
    inputs, outputs = {v.name for v in graph.inputs}, {v.name for v in graph.outputs}
    for pv in plan.values:
        gv = gvals[pv.name]
        want = (gv.kind, gv.dtype, gv.shape, node_of[gv.producer.name] if gv.producer is not None else -1,
                gv.name in inputs, gv.name in outputs, gv.const is not None)
        got = (pv.kind, pv.dtype, pv.shape, pv.producer, pv.is_input, pv.is_output, pv.is_const)
        if got != want:
            fields = ("kind", "dtype", "shape", "producer", "is_input", "is_output", "is_const")
            bad = next(f for f, a, b in zip(fields, got, want) if a != b)
            raise ModelFileError(f"value {pv.name!r}: the plan says {bad} {got[fields.index(bad)]!r}, "
                                 f"the graph {want[fields.index(bad)]!r}")
        size = value_nbytes(gv.dtype, gv.shape) if gv.kind == "tensor" else 0
        if pv.nbytes != size:
            raise ModelFileError(f"value {pv.name!r}: the plan sizes it {pv.nbytes!r} bytes, its type {size}")
        if pv.buffer >= 0:
            b = plan.memory.buffers[pv.buffer]
            if b.index != pv.buffer or b.size < size or b.offset + size > plan.memory.peak_bytes:
                raise ModelFileError(f"value {pv.name!r}: its {size} bytes do not fit buffer {pv.buffer} "
                                     f"({b.size} bytes at {b.offset}) inside the {plan.memory.peak_bytes}-byte arena")


def _check_node(plan: Plan, pn, gn, node_of: dict[str, int]) -> None:
    what = f"node {pn.name!r}"
    if pn.op_type != gn.op_type or pn.stream != gn.stream_id or pn.engine != (gn.engine or "compute"):
        raise ModelFileError(f"{what}: the plan has {pn.op_type} on stream {pn.stream} ({pn.engine}), "
                             f"the graph {gn.op_type} on stream {gn.stream_id} ({gn.engine or 'compute'})")
    reads = [v.name if v is not None else None for v in gn.inputs]
    if gn.subgraphs:
        reads += [v.name for v in gn.implicit_inputs()]
    got = [plan.values[i].name if i >= 0 else None for i in pn.inputs]
    if got != reads:
        raise ModelFileError(f"{what}: the plan reads {_names(got)}, the graph {_names(reads)}")
    outs = [plan.values[i].name for i in pn.outputs]
    if outs != [o.name for o in gn.outputs]:
        raise ModelFileError(f"{what}: the plan writes {_names(outs)}, the graph {_names([o.name for o in gn.outputs])}")
    for p in gn._control_preds:
        if node_of.get(p.name) not in pn.control_preds:
            raise ModelFileError(f"{what}: the plan drops its control edge from {p.name!r}")


def _names(names: list) -> str:
    shown = ", ".join("-" if n is None else repr(n) for n in names[:6])
    return f"[{shown}{', ...' if len(names) > 6 else ''}]"


__all__ = ["check_plan", "check_against_graph", "as_int", "as_index"]
