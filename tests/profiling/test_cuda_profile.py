"""Profiling on CUDA (skipped without a GPU)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pyge.executors import cuda as cuda_mod
from pyge.profiling import cuda as prof_cuda
from pyge.profiling.cuda import executor_streams, uses_graph

from ._helpers import feeds, reference_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from executors.fake_cuda import FakeCuda, FakeStream, TorchProxy  # noqa: E402


class _Fake:
    uses_cuda_graph = True
    streams = ["not a stream"]


def test_executor_is_asked_duck_typed():
    assert uses_graph(_Fake()) is True
    assert uses_graph(object()) is False

    class Exec:
        mode = "graph"
    assert uses_graph(Exec())
    Exec.mode = "eager"
    assert not uses_graph(Exec())
    assert executor_streams(_Fake(), 1) is None


def test_eager_event_profile_on_a_fake_device(monkeypatch):
    """The event-timing path (hooks -> per-stream events -> records) on the CPU, torch.cuda faked."""
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "torch", TorchProxy(fake))
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    for name in ("Event", "synchronize", "current_stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)      # executor_streams checks the type
    model = reference_model(True)
    ex = cuda_mod.CudaExecutor(model.graph, model.plan, "cuda", {"pyge.cudaGraph": "false"})
    assert ex.mode == "eager"
    prof = prof_cuda.profile_cuda(model, ex, feeds(), runs=2, warmup=1)
    assert prof.mode == "cuda events"
    by_node = {(r.run, r.name): r for r in prof.records}
    assert len(by_node) == 2 * len(model.plan.nodes)
    for r in prof.records:        # each node timed on its own logical stream, inside its run
        assert r.stream == model.plan.nodes[r.node].stream
        run = prof.runs[r.run]
        assert run.start - 1e-4 <= r.start <= r.end <= run.end + 1e-4
    records = [e for e in fake.log if e[0] == "record"]
    stream_names = {f"s{i}" for i in range(model.plan.num_streams)}
    assert {e[1] for e in records} >= stream_names        # timing events land on the logical streams
    assert prof.summary()["critical_path_s"] > 0


def _cuda_reference(options):
    import pyge
    from pyge.examples import PASS_NAME, reference_graph, split_abs
    with pyge.custom_passes_scope():
        pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        return pyge.compile(reference_graph((2048, 2048)), device="cuda", options=options)


@pytest.mark.gpu
def test_cuda_eager_profile_times_every_node_on_its_stream():
    model = _cuda_reference({"pyge.cudaGraph": "false"})
    prof = model.profile(feeds((2048, 2048)), runs=3)
    assert prof.mode == "cuda events"
    assert {r.name for r in prof.records} == {n.name for n in model.plan.nodes}
    assert {r.stream for r in prof.records} == {0, 1}
    assert all(r.end > r.start for r in prof.records)
    s = prof.summary()
    assert s["runs"] == 3 and s["wall_s"] > 0 and s["critical_path_s"] > 0


@pytest.mark.gpu
def test_cuda_graph_replay_profile_reads_kernels():
    model = _cuda_reference(None)
    prof = model.profile(feeds((2048, 2048)), runs=3)
    s = prof.summary()
    assert s["runs"] == 3 and s["serial_s"] > 0
    assert prof.to_chrome_trace()["traceEvents"]


def test_reference_model_helper_still_single_stream_without_pass():
    assert reference_model(False).num_streams == 1
