"""Shared test fixtures: where the onnx package's test data lives, and the GPU marker.

Every compilation in the suite (subprocesses too) re-checks the pass contracts after every
pass: the InvariantInstrument of pyge/passes/pipeline.py.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

os.environ.setdefault("PYGE_CHECK_INVARIANTS", "1")

ONNX_DATA = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data"


@pytest.fixture(scope="session")
def onnx_data_dir() -> Path:
    return ONNX_DATA


@pytest.fixture
def no_custom_passes():
    """An empty custom-pass registry for the test; the previous registrations come back after."""
    import pyge
    with pyge.custom_passes_scope():
        pyge.clear_custom_passes()
        yield


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
