"""Deterministic ASCII text form of a graph, for golden tests and terminals.

    graph demo (input: float32[4,64]) -> (output)
      %Abs_1_out = Abs(%input) @s0  # Abs_1
"""
from __future__ import annotations

from .graph import Graph, Node, Value


def _ty(v: Value) -> str:
    dt = v.dtype or "?"
    if v.shape is None:
        return f"{dt}[?]" if v.kind == "tensor" else f"{v.kind}<{dt}>"
    dims = ",".join("?" if d is None else str(d) for d in v.shape)
    s = f"{dt}[{dims}]"
    return s if v.kind == "tensor" else f"{v.kind}<{s}>"


def _attr(a) -> str:
    if isinstance(a, Graph):
        return f"<graph {a.name}>"
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return f"<tensor {a.dtype}{list(a.shape)}>"
    if isinstance(a, float):
        return repr(round(a, 6))
    if isinstance(a, (list, tuple)):
        return "[" + ",".join(_attr(x) for x in a) + "]"
    return repr(a)


def format_node(n: Node) -> str:
    outs = ", ".join(f"%{o.name}" for o in n.outputs)
    ins = ", ".join("%" + v.name if v is not None else "_" for v in n.inputs)
    attrs = ""
    plain = {k: v for k, v in sorted(n.attrs.items())}
    if plain:
        attrs = " {" + ", ".join(f"{k}={_attr(v)}" for k, v in plain.items()) + "}"
    stream = f" @s{n.stream_id}" if n.stream_id >= 0 else ""
    ctrl = ""
    if n._control_preds:
        ctrl = " after(" + ",".join(p.name for p in n._control_preds) + ")"
    return f"{outs} = {n.op_type}({ins}){attrs}{stream}{ctrl}  # {n.name}"


def format_graph(g: Graph, indent: str = "") -> str:
    ins = ", ".join(f"{v.name}: {_ty(v)}" for v in g.inputs)
    outs = ", ".join(v.name for v in g.outputs)
    lines = [f"{indent}graph {g.name} ({ins}) -> ({outs})"]
    for name in sorted(g.initializers):
        lines.append(f"{indent}  %{name} = initializer {_ty(g.initializers[name])}")
    for n in g.nodes:
        lines.append(f"{indent}  {format_node(n)}")
        for sg in n.subgraphs:
            lines.append(format_graph(sg, indent + "    "))
    return "\n".join(lines)
