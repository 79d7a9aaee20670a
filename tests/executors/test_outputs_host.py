"""Outputs handed to the caller as numpy: the plain tensor's fast numpy() and the tensors it
refuses (which take to_numpy's general path) give the same values."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import pyge
from pyge.executors.base import outputs_to_numpy


def _plan_with_outputs(n: int):
    b = pyge.GraphBuilder("outs")
    x = b.input("x", "float32", (2,))
    for i in range(n):
        b.output(b.op("Relu", [x], name=f"R{i}"), f"y{i}")
    return pyge.compile(b.build(), "cpu", {}).plan


def _cases():
    z = torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64)
    return {
        "float32": (torch.tensor([1.5, -2.0]), np.array([1.5, -2.0], np.float32)),
        "bfloat16": (torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
                     np.array([1.5, -2.0], ml_dtypes.bfloat16)),
        "conj bit": (z.conj(), np.array([1 - 2j, -3 + 4j], np.complex64)),
        "neg bit": (z.conj().imag, np.array([-2.0, 4.0], np.float32)),
        "requires grad": (torch.tensor([1.0, 2.0], requires_grad=True), np.array([1.0, 2.0], np.float32)),
        "uint16": (torch.tensor([1, 65535], dtype=torch.uint16), np.array([1, 65535], np.uint16)),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_every_kind_of_tensor_comes_out_as_its_values(case):
    t, want = _cases()[case]
    plan = _plan_with_outputs(1)
    got = outputs_to_numpy(plan, [t])["y0"]
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_fresh_outputs_are_not_copied_and_shared_ones_are():
    plan = _plan_with_outputs(2)
    t = torch.tensor([1.0, 2.0])
    a, b = outputs_to_numpy(plan, [t, t[:]]).values()
    a[0] = 9.0
    assert t[0] == 9.0            # the fresh output is t's own memory (no copy)
    assert b[0] == 1.0            # the second shares t's storage: a copy
