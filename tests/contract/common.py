"""Helpers shared by the contract tests."""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pyge
from pyge import GRAPH_SUCCESS, register_custom_pass
from pyge.cli import main as cli_main
from pyge.passes.custom.plugins import reset_plugins


SHAPE = (4, 4)
DUMP_RE = re.compile(r"^ge_onnx_(\d{8})_graph_(\d+)_(.+)\.pbtxt$")


def split_abs(graph, ctx):                   # the contract's example, verbatim
    for node in graph.get_direct_nodes():
        if node.name == "Abs_1":
            ctx.set_stream_id(node, ctx.allocate_next_stream_id())
    return GRAPH_SUCCESS


def ref_graph():
    return pyge.examples.reference_graph(SHAPE)


def x_in():
    return np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def onnx_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, list(SHAPE))
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, list(SHAPE))
    nodes = [helper.make_node("Relu", ["input"], ["r"], name="Relu_1"),
             helper.make_node("Abs", ["input"], ["a"], name="Abs_1"),
             helper.make_node("Add", ["r", "a"], ["output"], name="Add_1")]
    return helper.make_model(helper.make_graph(nodes, "ref", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def one_line(err) -> str:
    text = str(err.value if hasattr(err, "value") else err)
    assert "\n" not in text.strip(), text
    return text


def split_model(**kw):
    register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(split_abs)
    return pyge.compile(ref_graph(), **kw)


PLUGIN = """
import pyge
@pyge.custom_stream_pass({name!r})
def fn(graph, ctx):
    for n in graph.get_direct_nodes():
        if n.name == "Abs_1":
            ctx.set_stream_id(n, ctx.allocate_next_stream_id())
    return pyge.GRAPH_SUCCESS
"""


def make_opp(root, files: dict[str, str]):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    for dirpath, dirs, names in os.walk(root):
        for d in [dirpath, *(os.path.join(dirpath, n) for n in names)]:
            os.chmod(d, os.stat(d).st_mode & ~(stat.S_IWGRP | stat.S_IWOTH))
    return root
