"""Shared by the dump tests: the reference example compiled with and without its pass."""
from __future__ import annotations

import re

import pyge
from pyge.dumps import load_dump
from pyge.examples import PASS_NAME, reference_graph, split_abs

SMALL = (8, 16)
FILE_RE = re.compile(r"^ge_onnx_(\d{8})_graph_(\d+)_(.+)\.pbtxt$")


def compile_reference(with_pass: bool = True, graph=None, **kw):
    g = graph if graph is not None else reference_graph(SMALL)
    if not with_pass:
        return pyge.compile(g, **kw)
    with pyge.custom_passes_scope():
        pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        return pyge.compile(g, **kw)


def dumps_in(folder) -> list[tuple[int, int, str, str]]:
    """(seq, graph id, stage, path) of every dump in `folder`, in sequence order."""
    out = []
    for p in folder.iterdir():
        m = FILE_RE.match(p.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3), str(p)))
    return sorted(out)


def node_attrs(path) -> dict[str, dict]:
    """node name -> {attribute name: value} of a dump."""
    from onnx import helper
    mp = load_dump(path)
    return {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute} | {"op_type": n.op_type}
            for n in mp.graph.node}
