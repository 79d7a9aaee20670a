"""Helpers for checking a model's results: inputs that matter, outputs that show errors.

Comparing only a network's final output can hide a wrong result. The ONNX light models
(shipped in the onnx wheel under backend/test/data/light) fill every weight with one
constant, so their activations barely depend on the input; a global average pool flattens
much of what a random input changes. pyge's tests and GPU check therefore compare
intermediates (`with_intermediates`) of models with random weights (`random_weights`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir.graph import Graph

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# The light models this onnx wheel ships (nine in onnx 1.x: alexnet ... zfnet512).
LIGHT_MODELS = tuple(sorted(p.stem[len("light_"):] for p in Path(LIGHT_DIR).glob("light_*.onnx")))


def light_path(name: str) -> str:
    """Path of the light model `name` (e.g. "resnet50") in the installed onnx package."""
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


_RESHAPING = ("Unsqueeze", "Reshape", "Identity")
_WEIGHTED = ("Conv", "Gemm", "MatMul", "BatchNormalization", "Mul", "Add")


def random_weights(mp: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The model with random weights in place of constant fills. Changes `mp` and returns it.

    Each ConstantOfShape with a constant shape whose value feeds a weighted operator
    (directly or through Unsqueeze / Reshape / Identity) becomes an initializer of random
    values scaled to its role: He-normal convolution, Gemm and MatMul weights;
    BatchNormalization scale and variance, and Mul constants, uniform in [0.5, 1.5]; biases,
    means and Add constants normal with deviation 0.1. Activations then keep their scale
    through the depth and depend on the input throughout.
    """
    g = mp.graph
    rng = np.random.default_rng(seed)
    init = {t.name: t for t in g.initializer}
    uses: dict[str, tuple[str, int, onnx.NodeProto]] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            uses.setdefault(name, (n.op_type, i, n))

    def role(name: str):
        r = uses.get(name)
        while r is not None and r[0] in _RESHAPING and r[1] == 0 and r[2].output:
            r = uses.get(r[2].output[0])
        return r

    def value(shape: tuple[int, ...], r: tuple[str, int, onnx.NodeProto]) -> np.ndarray:
        op, i, node = r
        if (op == "BatchNormalization" and i in (1, 4)) or op == "Mul":
            return rng.random(shape, dtype=np.float32) + np.float32(0.5)
        std = 0.1
        if op in ("Conv", "Gemm", "MatMul") and i == 1:
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            fan_in = int(np.prod(shape[1:])) if op == "Conv" or trans_b else shape[0]
            std = (2.0 / max(fan_in, 1)) ** 0.5
        x = rng.standard_normal(shape, dtype=np.float32)
        x *= np.float32(std)
        return x

    def float32_fill(n: onnx.NodeProto) -> bool:
        """A ConstantOfShape making float32 (its 'value' attribute's type; float32 without one)."""
        return all(a.t.data_type == onnx.TensorProto.FLOAT for a in n.attribute if a.name == "value")

    keep, orphans = [], set()
    for n in g.node:
        r = role(n.output[0]) if n.op_type == "ConstantOfShape" and n.output and float32_fill(n) else None
        if r is not None and r[0] in _WEIGHTED and n.input and n.input[0] in init:
            shape = tuple(int(d) for d in numpy_helper.to_array(init[n.input[0]]))
            g.initializer.append(numpy_helper.from_array(value(shape, r), n.output[0]))
            if mp.ir_version < 4:        # before IR 4 every initializer is also a graph input
                g.input.append(helper.make_tensor_value_info(n.output[0], onnx.TensorProto.FLOAT, shape))
            orphans.add(n.input[0])
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    # The shapes the replaced fills were made from: drop those nothing else reads.
    orphans -= {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for field in (g.initializer, g.input):          # by index: no copy of the other tensors
        for i in reversed([i for i, t in enumerate(field) if t.name in orphans]):
            del field[i]
    return mp


_OBSERVED = ("Conv", "Concat", "Add", "Sum", "MaxPool", "AveragePool")


def with_intermediates(graph: Graph, count: int = 16) -> Graph:
    """The graph with about `count` intermediates added to its outputs: outputs of
    convolutions, concatenations, additions and pools, evenly spread over the node order.
    Changes `graph` and returns it."""
    picked = [n.outputs[0] for n in graph.nodes if n.op_type in _OBSERVED and n.outputs]
    step = max(1, len(picked) // count)
    graph.outputs.extend(v for v in picked[step - 1::step] if v not in graph.outputs)
    return graph


def relative_errors(got: dict, want: dict) -> dict[str, float]:
    """max |got - want| / max |want| for each output of `want` (numpy arrays or tensors, on
    any device): an error relative to each output's own scale, so one tolerance serves a
    softmax and a pre-activation alike."""
    def host(x) -> np.ndarray:
        if hasattr(x, "detach"):                       # a torch tensor, possibly on a GPU
            x = x.detach().float().cpu().numpy()
        return np.asarray(x, dtype=np.float64)
    out = {}
    for name, w in want.items():
        a, b = host(got[name]), host(w)
        out[name] = float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-12)) if b.size else 0.0
    return out


def one_node_model(op: str, inputs: dict, attrs: dict | None = None, *, opset: int = 17,
                   n_out: int = 1, outputs=None, consts=(), domain: str = "",
                   domain_opset: int = 1, name: str | None = None, ir_version: int = 8,
                   trim: bool = False) -> onnx.ModelProto:
    """A model of one `op` node, for testing a kernel on its own.

    `inputs` maps the node's input names, in order, to arrays; None is an absent optional
    input (named "" in the node; with `trim`, trailing absent inputs are left off instead).
    Names in `consts` become initializers, the others typed graph inputs. The outputs are
    y0 .. y{n_out-1}, or the names in `outputs` ("" for an absent output, kept off the graph
    outputs); their types are left to shape inference. The model imports `opset` of the
    default domain, and `domain_opset` of `domain` when that is set; `name` names the node
    (what error messages quote) and `ir_version` is set as given (onnxruntime refuses
    versions newer than it knows).
    """
    names = [n if a is not None else "" for n, a in inputs.items()]
    while trim and names and not names[-1]:
        names.pop()
    outs = list(outputs) if outputs is not None else [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=name, domain=domain, **(attrs or {}))
    g_in, inits = [], []
    for n, a in inputs.items():
        if a is None:
            continue
        a = np.asarray(a)
        if n in consts:
            inits.append(numpy_helper.from_array(a, n))
        else:
            g_in.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                      a.shape))
    g_out = [onnx.ValueInfoProto(name=o) for o in outs if o]
    graph = helper.make_graph([node], "t", g_in, g_out, inits)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, domain_opset)]
                                                 if domain else [])
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = ir_version
    return m
