"""A kernel's result is checked at the node that produced it (issue 20 item 12): a kernel
returning [], a numpy array, a bare tensor or the wrong number of outputs is an
ExecutionError naming that node, not the next node that reads the result; SystemExit
raised inside a kernel is an ExecutionError too, and never ends the caller's program."""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest
import torch

import pyge
from pyge.executors.cpu import CpuExecutor
from pyge.executors.sequential import SequentialExecutor
from pyge.kernels import register

from .helpers import compile_with_streams

BAD = {"on": True}

RESULTS = {   # mode -> (what the kernel returns for input x, what the error must say)
    "empty": (lambda x: [], r"returned a list of 0 results, expected a list of 1 output"),
    "numpy": (lambda x: x.numpy() + 1, r"returned a numpy.ndarray, expected a list of 1 output"),
    "tensor": (lambda x: x + 1, r"returned a torch.Tensor, expected a list of 1 output"),
    "numpy element": (lambda x: [x.numpy() + 1], r"returned a numpy.ndarray for output 'bad_out'"),
    "two": (lambda x: [x + 1, x + 2], r"returned a list of 2 results, expected a list of 1 output"),
    "none": (lambda x: None, r"returned a NoneType, expected a list of 1 output"),
    "scalar element": (lambda x: [1.5], r"returned a float for output 'bad_out'"),
}


def _exit(x):
    sys.exit(3)


@register("TestBadResult", domain="pyge.test")
def _bad_result(ctx):
    mode = ctx.attr("mode")
    make = _exit if mode == "exit" else RESULTS[mode][0]

    def fn(xs):
        return make(xs[0]) if BAD["on"] else [xs[0] + 1]
    return fn


@pytest.fixture(autouse=True)
def _bad():
    BAD["on"] = True
    yield
    BAD["on"] = False


def _graph(mode: str):
    """x -> Bad (the faulty kernel) -> Next (Relu) -> y, and a side branch Side (Abs)."""
    b = pyge.GraphBuilder("results")
    x = b.input("x", "float32", (2, 3))
    bad = b.op("TestBadResult", [x], name="Bad", domain="pyge.test", outputs=["bad_out"], mode=mode)
    nxt = b.op("Relu", [bad], name="Next")
    side = b.op("Abs", [x], name="Side")
    b.output(b.op("Add", [nxt, side], name="Y"), "y")
    return b.build()


_PLACEMENTS = {
    "one stream": None,
    "bad on a side stream": {"Bad": 1, "Next": 0, "Side": 0, "Y": 0},
    "bad on the caller's stream": {"Bad": 0, "Next": 0, "Side": 1, "Y": 1},
}


def _model(mode: str, placement: str):
    g = _graph(mode)
    streams = _PLACEMENTS[placement]
    if streams is None:
        m = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
        assert isinstance(m.executor, SequentialExecutor)
    else:
        m = compile_with_streams(g, streams)
        assert isinstance(m.executor, CpuExecutor)
    return m


@pytest.mark.timeout(30)
@pytest.mark.parametrize("placement", list(_PLACEMENTS))
@pytest.mark.parametrize("mode", list(RESULTS))
def test_a_bad_result_is_named_at_its_node(mode, placement):
    model = _model(mode, placement)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    with pytest.raises(pyge.ExecutionError) as info:
        model.run({"x": x})
    err = info.value
    assert "node 'Bad' (TestBadResult)" in str(err) and "Next" not in str(err)
    assert err.node.startswith("node 'Bad'")
    assert isinstance(err.cause, TypeError)
    assert re.search(RESULTS[mode][1], str(err)), str(err)
    BAD["on"] = False                 # usable afterwards
    np.testing.assert_allclose(model.run({"x": x})["y"], np.maximum(x + 1, 0) + np.abs(x))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("placement", list(_PLACEMENTS))
def test_system_exit_in_a_kernel_is_an_execution_error(placement):
    model = _model("exit", placement)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(pyge.ExecutionError, match=r"node 'Bad' \(TestBadResult\).*SystemExit") as info:
        model.run({"x": x})
    assert isinstance(info.value.cause, SystemExit)
    BAD["on"] = False
    np.testing.assert_allclose(model.run({"x": x})["y"], 2 * x + 1)


def test_profiling_names_the_node_too():
    model = _model("empty", "bad on a side stream")
    with pytest.raises(pyge.ExecutionError, match="node 'Bad'"):
        model.profile({"x": np.ones((2, 3), np.float32)}, runs=1)


def test_a_tuple_of_the_right_length_and_a_tensor_subclass_are_accepted():
    class Sub(torch.Tensor):
        pass

    @register("TestTupleResult", domain="pyge.test")
    def _tuple(ctx):
        return lambda xs: (torch.relu(xs[0]).as_subclass(Sub),)

    b = pyge.GraphBuilder("tuple")
    x = b.input("x", "float32", (2, 3))
    b.output(b.op("Abs", [b.op("TestTupleResult", [x], name="T", domain="pyge.test")], name="A"), "y")
    model = pyge.compile(b.build(), "cpu")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_allclose(model.run({"x": x})["y"], np.maximum(x, 0))
