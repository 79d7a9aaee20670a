"""Constant folding: Shape and Size of values whose dims are known become initializers."""
from __future__ import annotations

import numpy as np
import pytest

import pyge
from pyge.passes.graph.fold_constants import fold_constants


def _graph(shape, op="Shape", **attrs):
    b = pyge.GraphBuilder("shape", opset=17)
    x = b.input("x", "float32", shape)
    y = b.op("Relu", [x], name="relu")
    s = b.op(op, [y], name="probe", **attrs)
    b.output(b.op("Cast", [s], name="cast", to=1))
    return b.build()


@pytest.mark.parametrize("attrs,want", [({}, [2, 3, 5]), (dict(start=-1), [5]),
                                        (dict(start=1, end=2), [3]), (dict(end=-1), [2, 3]),
                                        (dict(start=-9, end=9), [2, 3, 5])])
def test_shape_of_a_static_value_folds(attrs, want):
    g = _graph((2, 3, 5), **attrs)
    g.value("relu_out").shape = (2, 3, 5)
    assert fold_constants(g) == 2                    # Shape, then the Cast that reads it
    np.testing.assert_array_equal(g.initializers["cast_out"].const, np.float32(want))
    assert [n.op_type for n in g.nodes] == ["Relu"]


def test_size_folds():
    g = _graph((2, 3, 5), op="Size")
    g.value("relu_out").shape = (2, 3, 5)
    fold_constants(g)
    assert g.initializers["cast_out"].const == np.float32(30)


@pytest.mark.parametrize("attrs,folds", [({}, False), (dict(start=1), True)])
def test_symbolic_dims_fold_only_when_not_read(attrs, folds):
    g = _graph(("n", 3, 5), **attrs)
    g.value("relu_out").shape = ("n", 3, 5)
    fold_constants(g)
    assert ("probe" in g.metadata.get("folded", "")) is folds


def test_unknown_shape_does_not_fold():
    g = _graph((2, 3, 5))
    assert fold_constants(g) == 0


def test_compiled_model_gives_the_same_numbers():
    g = _graph((2, 3, 5), start=1)
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    got = pyge.compile(g).run({"x": x})
    np.testing.assert_array_equal(got["cast_out"], np.float32([3, 5]))


# -- the size bound, decided before the kernel runs (issue 20 item 6) ------------------------

def _constant_of_shape(dims, name="C"):
    """y = ConstantOfShape(dims) as a 114-byte ONNX model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    shape = numpy_helper.from_array(np.array(dims, dtype=np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name=name,
                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.5]))
    g = helper.make_graph([node], "big", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _spy_kernels(monkeypatch):
    """Record every node whose kernel fold_constants builds; such a kernel raises instead of
    computing (a 6 GB value must not be allocated by the test either)."""
    import pyge.kernels.build as kb
    built = []
    real = kb.build_kernel

    def spy(node, device, *a, **k):
        built.append(node.name)
        if node.op_type == "ConstantOfShape":
            def refuse(inputs):
                raise MemoryError("the test refuses to allocate this")
            return refuse
        return real(node, device, *a, **k)
    monkeypatch.setattr(kb, "build_kernel", spy)
    return built


def test_huge_value_is_not_computed_at_compile_time(monkeypatch):
    """ConstantOfShape of [1.5e9, 1] float32 (6 GB) is left to run time without running it."""
    g = pyge.load_onnx(_constant_of_shape([1_500_000_000, 1]))
    built = _spy_kernels(monkeypatch)
    assert fold_constants(g) == 0
    assert built == [] and [n.name for n in g.nodes] == ["C"]


def test_size_comes_from_the_constant_inputs_not_a_declared_shape(monkeypatch):
    """A model that declares the output 1 x 1 still does not get its 6 GB folded: the size
    is ONNX's inference for the node with its actual shape input."""
    mp = _constant_of_shape([1_500_000_000, 1])
    mp.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1
    mp.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1
    g = pyge.load_onnx(mp, infer=False)
    assert g.outputs[0].shape == (1, 1)
    built = _spy_kernels(monkeypatch)
    assert fold_constants(g) == 0 and built == []


def test_small_values_still_fold(monkeypatch):
    g = pyge.load_onnx(_constant_of_shape([4, 1024]))               # 16 KiB
    assert fold_constants(g) == 1
    np.testing.assert_array_equal(g.initializers["y"].const, np.full((4, 1024), 1.5, np.float32))


def test_unknown_output_size_does_not_fold(monkeypatch):
    """An operator ONNX cannot infer, with nothing inferred on the graph either, is not run."""
    b = pyge.GraphBuilder("u", opset=17)
    k = b.initializer("k", np.ones(3, np.float32))
    y = b.op("Relu", [k], name="r")
    b.output(y)
    g = b.build()
    g.nodes[0].op_type = "Unknown"                              # no schema, no kernel
    g.nodes[0].outputs[0].shape = None
    built = _spy_kernels(monkeypatch)
    assert fold_constants(g) == 0 and built == []


def test_compile_peak_memory_stays_small(tmp_path):
    """In a fresh process: compiling a 400 MB ConstantOfShape adds under 64 MiB to the peak
    resident size (ru_maxrss) over compiling a tiny model first (torch loaded by both)."""
    import subprocess
    import sys
    (tmp_path / "tiny.onnx").write_bytes(_constant_of_shape([4, 4]).SerializeToString())
    (tmp_path / "big.onnx").write_bytes(_constant_of_shape([100_000_000, 1]).SerializeToString())
    script = ("import resource, sys, pyge\n"
              "pyge.compile(sys.argv[1])\n"
              "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "m = pyge.compile(sys.argv[2])\n"
              "assert m.graph.nodes[0].op_type == 'ConstantOfShape'\n"
              "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "tiny.onnx"),
                          str(tmp_path / "big.onnx")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    grown_mib = int(out.stdout.split()[-1])
    assert grown_mib < 64, f"compile peak grew by {grown_mib} MiB"
