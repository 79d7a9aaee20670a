"""The text form is deterministic (golden)."""
from __future__ import annotations

import numpy as np

import pyge


def test_golden_text_form():
    b = pyge.GraphBuilder("demo")
    x = b.input("input", "float32", (4, 64))
    w = b.initializer("w", np.zeros((64, 8), np.float32))
    a = b.op("Abs", [x], name="Abs_1")
    m = b.op("MatMul", [a, w], name="MatMul_1")
    b.output(m)
    g = b.build()
    g.node("Abs_1").stream_id = 1
    assert pyge.format_graph(g) == (
        "graph demo (input: float32[4,64]) -> (MatMul_1_out)\n"
        "  %w = initializer float32[64,8]\n"
        "  %Abs_1_out = Abs(%input) @s1  # Abs_1\n"
        "  %MatMul_1_out = MatMul(%Abs_1_out, %w)  # MatMul_1")
