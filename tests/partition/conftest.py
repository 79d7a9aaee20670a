"""Fixtures for the partition tests: the models of models.py loaded as pyge graphs."""
from __future__ import annotations

import numpy as np
import pytest

import pyge

from . import models


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def graph_of(name: str):
    return pyge.load_onnx(getattr(models, name)())
