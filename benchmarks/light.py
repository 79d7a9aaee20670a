"""The light models shipped in the onnx wheel (onnx/backend/test/data/light), and the seeded
random feeds the CPU benchmarks give them. Imported by the benchmarks and by their child
processes (which get this folder on PYTHONPATH through child_env)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
HERE = Path(__file__).resolve().parent


def model_path(name: str) -> str:
    return str(LIGHT_DIR / f"light_{name}.onnx")


def random_feeds(path: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds for every graph input that is not an initializer
    (free dimensions set to 1)."""
    m = onnx.load(path, load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
                                        ).astype(np.float32)
            for v in m.graph.input if v.name not in init}


def child_env(extra: dict | None = None) -> dict:
    """This process's environment for a benchmark child: the source tree and this folder
    first on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(HERE.parent / "src"), str(HERE)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra or {})
    return env


def random_weights(mp: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The model with random weights in place of the light models' constant fills.

    A light model's weights are ConstantOfShape nodes (every weight 0.02, say), so most of
    its activations are the same whatever the input, and comparing outputs could not catch
    a kernel that read the wrong buffer. Here each ConstantOfShape whose shape is a constant
    and that feeds a weight becomes an initializer of random values scaled to its role (He-normal
    convolution and Gemm weights, BatchNormalization scale and variance near 1, small
    biases and means, Mul/Add constants near 1 and 0; the consumer is found through
    Unsqueeze / Reshape / Identity), so activations keep their scale and
    depend on the input throughout. Changes `mp` in place and returns it.
    """
    from onnx import numpy_helper
    g = mp.graph
    rng = np.random.default_rng(seed)
    init = {t.name: t for t in g.initializer}
    uses: dict[str, tuple[str, int, onnx.NodeProto]] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            uses.setdefault(name, (n.op_type, i, n))

    def value(shape: tuple[int, ...], role: tuple[str, int, onnx.NodeProto]) -> np.ndarray:
        op, i, node = role
        if (op == "Conv" and i == 1) or (op in ("Gemm", "MatMul") and i == 1):
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            fan_in = int(np.prod(shape[1:])) if op == "Conv" or trans_b else shape[0]
            return rng.normal(0.0, (2.0 / max(fan_in, 1)) ** 0.5, shape)
        if (op == "BatchNormalization" and i in (1, 4)) or op == "Mul":
            return rng.uniform(0.5, 1.5, shape)
        return rng.normal(0.0, 0.1, shape)

    def role(name: str):
        """Who consumes `name`, looking through Unsqueeze / Reshape / Identity."""
        r = uses.get(name)
        while r is not None and r[0] in ("Unsqueeze", "Reshape", "Identity") and r[1] == 0:
            r = uses.get(r[2].output[0])
        return r

    keep = []
    for n in g.node:
        out = n.output[0] if n.output else ""
        r = role(out) if n.op_type == "ConstantOfShape" else None
        if (r is not None and n.input and n.input[0] in init
                and r[0] in ("Conv", "Gemm", "MatMul", "BatchNormalization", "Mul", "Add")):
            shape = tuple(int(d) for d in numpy_helper.to_array(init[n.input[0]]))
            g.initializer.append(numpy_helper.from_array(value(shape, r).astype(np.float32), out))
            if mp.ir_version < 4:        # before IR 4 every initializer is also a graph input
                g.input.append(onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    return mp
