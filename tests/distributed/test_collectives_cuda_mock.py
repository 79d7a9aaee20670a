"""The CUDA executor with collectives, on the CPU: torch.cuda replaced by the race-checking
fake of tests/executors/fake_cuda.py, a one-rank gloo group on CPU tensors standing in for
NCCL on device tensors.

What this proves: the host-side flow. The CUDA executor issues each collective while its
node's logical stream is current (so a synchronous NCCL collective, which ProcessGroupNCCL
runs on the current stream, lands on the pyge stream); the collective's write and its
producer's and consumer's accesses are ordered by the plan's events under CUDA's rules (the
fake's vector clocks find no race); the capture decision follows the backend (host backends
eager, NCCL >= 2.9.6 captured), and a capture with a collective inside keeps CUDA's capture
rules (every stream joins the capture and joins back). What it cannot prove: anything about
NCCL itself (that it really runs on the current stream, capture and replay of its kernels,
its watchdog's timeout), nor two ranks on a GPU: that needs a GPU session.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import pyge
from pyge.kernels import collective_group as pd
from pyge import tensor_parallel as tp
from pyge.executors import base as base_mod
from pyge.executors import cuda as cuda_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from executors.fake_cuda import AccessMode, FakeCuda, TorchProxy  # noqa: E402

SHAPE = tp.BlockShape(batch=8, model=16, hidden=32, branch=16)
# c10d's in-place collectives declare no writes in their schemas: say which argument they write.
_WRITES = {"allreduce_": "tensors", "_allgather_base_": "output_tensor", "alltoall_base_": "output"}


class CollectiveAccess(AccessMode):
    """AccessMode, plus the write each c10d collective makes into its output."""

    def __init__(self, cuda: FakeCuda, log: list):
        super().__init__(cuda)
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        name = func.overloadpacket.__name__
        if func.namespace == "c10d" and name in _WRITES:
            named = dict(zip((a.name for a in func._schema.arguments), args))
            self.cuda.access(named[_WRITES[name]], write=True, what=f"c10d.{name}")
            self.log.append((name, self.cuda.current.name))
        return out


@pytest.fixture
def fake(monkeypatch, group):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "torch", TorchProxy(fake))
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    monkeypatch.setattr(cuda_mod, "record_use", fake.record_stream)

    def to_numpy(plan, outs, owned=(), positions=None):
        fake.access(base_mod.pick(outs, positions), write=False, what="copy to host", host=True)
        return base_mod.outputs_to_numpy(plan, outs, owned, positions)
    monkeypatch.setattr(cuda_mod, "outputs_to_numpy", to_numpy)

    def to_device(arrays, device):
        out = base_mod.feeds_to_device(arrays, device)
        fake.access(out, write=True, what="copy to device", fresh=True)
        return out
    monkeypatch.setattr(cuda_mod, "feeds_to_device", to_device)
    return fake


def _model():
    m = pyge.compile(tp.block_graph(SHAPE, 0, 1))
    return m, tp.block_inputs(SHAPE), m.run(tp.block_inputs(SHAPE))


def _executor(m):
    return cuda_mod.CudaExecutor(m.graph, m.plan, "cuda", m.options)


def test_host_backend_runs_eagerly_on_the_collectives_stream(fake):
    m, x, want = _model()
    ex = _executor(m)
    assert ex.mode == "eager"
    assert ex.eager_reason == ("node 'AllReduce' (AllReduce): collectives run on backend gloo, "
                               "which works on the host: not capturable")
    log: list = []
    with CollectiveAccess(fake, log):
        got = ex.run(x)
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)
    assert fake.violations == []
    assert log == [("allreduce_", f"s{m.stream_of('AllReduce')}")]


def test_capturable_backend_captures_the_collective(fake, monkeypatch):
    monkeypatch.setattr(pd, "capture_blocker", lambda backend: None)   # as NCCL >= 2.9.6
    m, x, want = _model()
    ex = _executor(m)
    assert ex.mode == "graph"
    log: list = []
    with CollectiveAccess(fake, log):
        got = ex.run(x)                   # warm-up, capture, replay
    assert ex.capture_error is None and fake.n_captures == 1
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)
    assert fake.violations == []
    ar = f"s{m.stream_of('AllReduce')}"
    assert log == [("allreduce_", ar), ("allreduce_", ar)]    # warm-up, then inside the capture


def test_the_race_checker_sees_a_collective_left_unordered(fake):
    """The same run with every event wait dropped: the checker must report the collective."""
    m, x, _ = _model()
    ex = _executor(m)
    fake.ignore_waits = True
    with CollectiveAccess(fake, []):
        ex.run(x)
    assert any("c10d.allreduce_" in v for v in fake.violations), fake.violations


def test_nccl_collectives_are_issued_synchronously_on_the_current_stream(fake, monkeypatch):
    """Told that the group's backend is NCCL, the kernel issues without async_op (NCCL's
    synchronous collectives run on the current stream) and the capture follows the version."""
    import torch.distributed as dist
    monkeypatch.setattr(pd, "_backend_for", lambda *a: "nccl")
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    calls = []
    real = dist.all_reduce

    def spy(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append((async_op, fake.current.name))
        return real(tensor, op=op, group=group, async_op=async_op)
    monkeypatch.setattr(dist, "all_reduce", spy)
    m, x, want = _model()
    calls.clear()
    ex = _executor(m)
    assert ex.mode == "graph"
    with CollectiveAccess(fake, []):
        got = ex.run(x)
    np.testing.assert_allclose(got["out"], want["out"], rtol=1e-6, atol=1e-6)
    assert calls == [(False, f"s{m.stream_of('AllReduce')}")] * 2 and fake.violations == []


@pytest.mark.parametrize("version,capturable", [((2, 9, 5), False), ((2, 9, 6), True), ((2, 21, 5), True)])
def test_nccl_capture_needs_2_9_6(monkeypatch, version, capturable):
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: version)
    why = pd.capture_blocker("nccl")
    assert (why is None) == capturable
    if why:
        assert "needs 2.9.6" in why
    assert "not capturable" in pd.capture_blocker("gloo")
