"""Which nodes are *unknown* (GE's unknown-shape nodes): they run in the dynamic part.

A node is unknown when
  - a dimension of one of its inputs or outputs is symbolic (an ONNX `dim_param`, a
    torch.export symbol: a str in `Value.shape`) or data dependent (None in a known rank:
    NonZero's row count, a Reshape to a computed shape); sequences and optionals count as
    dynamic (their length is data). A shape that was never recorded (`Value.shape` None:
    an operator ONNX inference does not know, such as a user's kernel, and what follows it;
    most control-flow bodies, whose types infer_types does not record) says nothing either
    way and does not count: such a model stays static, as it compiled before the partition
    existed (on cuda its plan then runs eagerly, executors/cuda_memory.graph_blocker);
  - its operator's output shape depends on input values whatever inference says
    (kernels/host_ops.DATA_DEPENDENT_OPS, and TopK with a k that is not a constant);
  - on the target device its kernel runs on the host: on cuda the HOST_OPS (control flow,
    kernels that read device values, random draws) and string tensors; on cpu every
    kernel runs on the host, so this rule adds nothing there;
  - a subgraph of it holds an unknown node (the rules above, applied to the body's nodes).
A value that nothing reads and that is no graph output does not count.
Then, as GE does, Constant nodes whose every consumer is unknown go with them.

`unknown_nodes` returns the reason per unknown node (a line for logs and tests).
"""
from __future__ import annotations

from ...ir.graph import TENSOR, Graph, Node, Value
from ...ir.node import holds_graph
from ...kernels.host_ops import DATA_DEPENDENT_OPS, HOST_OPS


def value_reason(v: Value | None) -> str | None:
    """Why `v`'s size is known not to be fixed at compile time (None: nothing says so)."""
    if v is None:
        return None
    if v.kind == TENSOR and v.shape is not None:
        for d in v.shape:              # the usual case, quickly: every dim a plain int >= 0
            if type(d) is not int or d < 0:
                break
        else:
            return None
    if v.kind != TENSOR:
        return f"value {v.name!r} is a {v.kind}"
    for i, d in enumerate(v.shape or ()):
        if isinstance(d, str):
            return f"value {v.name!r} has the symbolic dim {d!r} (axis {i})"
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            return f"value {v.name!r} has a data-dependent dim (axis {i})"
    return None


def _read(graph: Graph) -> set[int]:
    """Ids of the values some node of `graph` reads (explicitly or inside a body), plus its outputs."""
    out = {id(v) for v in graph.outputs}
    for n in graph._nodes:
        if n.attrs and holds_graph(n.attrs):
            out.update(id(v) for v in n.all_inputs())
        else:                            # no body: its explicit inputs are all it reads
            out.update([id(v) for v in n._inputs if v is not None])
    return out


def node_reason(node: Node, device: str, read: set[int]) -> str | None:
    """Why `node` is unknown on `device` (None: it is known). `read`: ids of values read."""
    op = node.op_type
    if not node.domain and op in DATA_DEPENDENT_OPS:
        return f"{op} has a data-dependent output shape"
    ins = node._inputs
    if not node.domain and op == "TopK" and len(ins) > 1 and ins[1] is not None \
            and ins[1].const is None:
        return "TopK takes k as a tensor computed at run time"
    on_cuda = str(device).startswith("cuda")
    if on_cuda and not node.domain and op in HOST_OPS:
        return f"{op} runs on the host on {device}"
    has_body = bool(node.attrs) and holds_graph(node.attrs)
    # (without a body, the explicit inputs in order: the first culprit is all_inputs' first)
    for v in node.all_inputs() if has_body else [v for v in ins if v is not None]:
        why = value_reason(v)
        if why is not None:
            return f"input {why}"
        if on_cuda and v.dtype == "object":
            return f"input {v.name!r} is a string tensor (host only)"
    for v in node._outputs:
        if id(v) not in read:
            continue
        why = value_reason(v)
        if why is not None:
            return f"output {why}"
        if on_cuda and v.dtype == "object":
            return f"output {v.name!r} is a string tensor (host only)"
    for body in node.subgraphs if has_body else ():
        inner = _first_unknown(body, device)
        if inner is not None:
            return f"its subgraph {body.name!r} holds an unknown node ({inner})"
    return None


def _first_unknown(body: Graph, device: str) -> str | None:
    read = _read(body)
    for n in body.nodes:
        why = node_reason(n, device, read)
        if why is not None:
            return f"node {n.name!r}: {why}"
    return None


def _all_static(graph: Graph, device: str) -> bool:
    """Whether no node of `graph` can be unknown: no operator the rules name, no body,
    every value a tensor of plain non-negative dims (the usual graph, checked in one walk;
    then every node_reason would say None, and no Constant has an unknown reader)."""
    if str(device).startswith("cuda"):
        return False                       # string tensors and host kernels count there
    for v in (*graph.inputs, *graph.initializers.values()):
        if value_reason(v) is not None:
            return False
    for n in graph._nodes:
        if n.attrs and holds_graph(n.attrs):
            return False
        if not n.domain and (n.op_type in DATA_DEPENDENT_OPS or n.op_type == "TopK"):
            return False
        for v in n._outputs:
            if v.kind != TENSOR or v.shape is None:
                if value_reason(v) is not None:
                    return False
                continue
            for d in v.shape:
                if type(d) is not int or d < 0:
                    return False
    return True


def unknown_nodes(graph: Graph, device: str) -> dict[int, str]:
    """id(node) -> why it is unknown, for the unknown nodes among `graph`'s direct nodes."""
    if _all_static(graph, device):
        return {}
    read = _read(graph)
    out: dict[int, str] = {}
    for n in graph._nodes:
        why = node_reason(n, device, read)
        if why is not None:
            out[id(n)] = why
    for n in graph.nodes:
        if n.op_type == "Constant" and not n.domain and id(n) not in out:
            users = {id(c) for o in n.outputs for c in o.consumers}
            if users and users <= set(out) and not any(o in graph.outputs for o in n.outputs):
                out[id(n)] = "a Constant that only unknown nodes read"
    return out


__all__ = ["unknown_nodes", "node_reason", "value_reason"]
