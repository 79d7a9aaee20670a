"""The reference example of GE's custom stream pass feature, reusable by tests and `pyge demo`.

Two operators with no dependency between them, `Relu_1` and `Abs_1`, both read the input
and `Add_1` joins them. GE's built-in rules put all three in one engine cluster (Add_1 joins
both of its parents), and a cluster gets one stream whatever ge.streamMaxParallelNum says, so
they run one after the other; the ten-line pass `split_abs`
gives `Abs_1` a stream of its own, and the compiled model has two streams with a Send/Recv
pair between `Abs_1` and `Add_1`.

    g = pyge.examples.reference_graph()
    with pyge.custom_passes_scope():
        pyge.register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(pyge.examples.split_abs)
        model = pyge.compile(g)
    model.stream_of("Abs_1")   # 1
"""
from __future__ import annotations

import numpy as np

from .ir.builder import GraphBuilder
from .ir.graph import Graph
from .passes.custom import GRAPH_SUCCESS

PASS_NAME = "SplitAbs"
INPUT_SHAPE = (1024, 1024)   # 4 MiB of float32: each elementwise op is real work on a CPU core


def reference_graph(shape: tuple[int, ...] = INPUT_SHAPE) -> Graph:
    """input -> Relu_1, input -> Abs_1, (Relu_1, Abs_1) -> Add_1 -> output."""
    b = GraphBuilder("reference")
    x = b.input("input", "float32", shape)
    r = b.op("Relu", [x], name="Relu_1")
    a = b.op("Abs", [x], name="Abs_1")
    b.op("Add", [r, a], name="Add_1", outputs=["output"])
    b.graph.outputs.append(b.graph.value("output"))
    return b.build()


def reference_inputs(shape: tuple[int, ...] = INPUT_SHAPE, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal(shape, dtype=np.float32)}


def split_abs(graph, ctx):
    """The reference's pass: find `Abs_1` and give it a new stream."""
    for node in graph.get_direct_nodes():
        if node.name == "Abs_1":
            ctx.set_stream_id(node, ctx.allocate_next_stream_id())
    return GRAPH_SUCCESS


__all__ = ["reference_graph", "reference_inputs", "split_abs", "PASS_NAME", "INPUT_SHAPE"]
