"""Collectives on a real GPU (skipped without one): NCCL in a one-rank group, so one GPU is
enough. What the fake device cannot show: NCCL's collective captured into the CUDA graph
and replayed on the pyge stream, with the same numbers as the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import pyge
from pyge import tensor_parallel as tp

pytestmark = pytest.mark.gpu
SHAPE = tp.BlockShape(batch=32, model=64, hidden=128, branch=64)


@pytest.fixture
def nccl(no_env):
    import torch.distributed as dist
    if not dist.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("cuda", torch.cuda.current_device()))
    yield
    dist.destroy_process_group()


def test_nccl_allreduce_is_captured_and_replayed(nccl):
    from pyge.kernels.collective_group import capture_blocker
    model = pyge.compile(tp.block_graph(SHAPE, 0, 1), device="cuda")
    feeds = tp.block_inputs(SHAPE)
    want = tp.reference(feeds["x"], tp.full_weights(SHAPE))
    for _ in range(3):                      # warm-up + capture, then replays
        out = model.run(feeds)
        np.testing.assert_allclose(out["out"], want["out"], rtol=1e-4, atol=1e-4)
    ex = model.executor
    assert ex.mode == ("graph" if capture_blocker("nccl") is None else "eager"), ex.eager_reason
    assert ex.capture_error is None
