"""Shared by the profiling tests: the reference example, with and without its custom pass."""
from __future__ import annotations

import pyge
from pyge.examples import PASS_NAME, reference_graph, reference_inputs, split_abs


def reference_model(with_pass: bool, shape=(64, 64)):
    g = reference_graph(shape)
    if not with_pass:
        return pyge.compile(g)
    with pyge.custom_passes_scope():
        pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        return pyge.compile(g)


def feeds(shape=(64, 64)):
    return reference_inputs(shape)
