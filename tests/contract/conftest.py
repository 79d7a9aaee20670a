"""Every contract test starts and ends clean: no registrations, plugin state or dump settings leak."""
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


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    """No registrations, plugin state or dump settings leak in or out."""
    for var in ("DUMP_GE_GRAPH", "DUMP_GRAPH_LEVEL", "DUMP_GRAPH_PATH", "PYGE_OPP_PATH", "ASCEND_OPP_PATH"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    with pyge.custom_passes_scope():
        pyge.clear_custom_passes()
        yield
    reset_plugins()


