"""The check_ops pass: every operator, in subgraphs too, has a kernel; all that lack one are
named in one error, before any other pass runs."""
from __future__ import annotations

import pytest

import pyge
from pyge.passes.graph.check_ops import check_ops, unsupported_ops


def _graph(*ops):
    b = pyge.GraphBuilder("ops")
    x = b.input("x", "float32", (2,))
    for i, (op, domain) in enumerate(ops):
        x = b.op(op, [x], name=f"n{i}", domain=domain)
    b.output(x)
    return b.build()


def test_a_supported_graph_passes():
    g = _graph(("Relu", ""), ("Abs", ""))
    assert unsupported_ops(g) == {}
    check_ops(g)


def test_every_missing_operator_once_with_a_node():
    g = _graph(("Relu", ""), ("Frobnicate", ""), ("Frobnicate", ""), ("Zap", "com.acme"))
    assert unsupported_ops(g) == {"Frobnicate": "n1", "com.acme.Zap": "n3"}
    with pytest.raises(pyge.UnsupportedOperatorError,
                       match=r"Frobnicate \(node 'n1'\), com.acme.Zap \(node 'n3'\)"):
        check_ops(g)


def test_subgraph_operators_are_checked():
    body = _graph(("Frobnicate", ""))
    b = pyge.GraphBuilder("outer")
    cond = b.input("c", "bool", ())
    b.output(b.op("If", [cond], name="if", then_branch=body, else_branch=_graph(("Relu", ""))))
    assert unsupported_ops(b.build()) == {"Frobnicate": "n0"}


def test_compile_fails_before_the_other_passes():
    with pytest.raises(pyge.UnsupportedOperatorError, match="Frobnicate"):
        pyge.compile(_graph(("Frobnicate", "")))
