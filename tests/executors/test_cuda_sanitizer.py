"""The CUDA executor's stream ordering, checked byte by byte on the CPU (fake_cuda.py).

Without a GPU a missing event changes nothing visible: the CPU runs every kernel at once,
in issue order. These tests run the CUDA executor on random graphs with random stream
assignments (and on light models) under a fake torch.cuda that keeps CUDA's happens-before
order and sees every byte each ATen op touches; they fail on any pair of unordered
conflicting accesses, on a cross-stream read the caching allocator was not told about
(record_stream), and on a capture CUDA would refuse (work outside it, dependencies on
work before it, streams not joined back). The last tests break the executor or the plan on
purpose and check the sanitizer notices.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import pyge
from pyge.executors import base as base_mod
from pyge.executors import cuda as cuda_mod
from pyge.testing import relative_errors, with_intermediates

from .fake_cuda import AccessMode, FakeCuda, FakeGraph, TorchProxy
from .helpers import cached_light_model, random_feeds, random_graph, random_streams, replan


@pytest.fixture
def fake(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "torch", TorchProxy(fake))
    monkeypatch.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
    monkeypatch.setattr(cuda_mod, "record_use", fake.record_stream)

    # Host <-> device copies are no ATen ops on the CPU (from_numpy, .numpy(), .tolist()):
    # record them where the executor makes them, on the current stream.
    def to_numpy(plan, outs, owned=(), positions=None):
        fake.access(base_mod.pick(outs, positions), write=False, what="copy to host",
                    host=True)                                          # .cpu() on the caller's stream
        return base_mod.outputs_to_numpy(plan, outs, owned, positions)
    monkeypatch.setattr(cuda_mod, "outputs_to_numpy", to_numpy)

    def to_device(arrays, device):
        out = base_mod.feeds_to_device(arrays, device)
        fake.access(out, write=True, what="copy to device", fresh=True)  # on the caller's stream
        return out
    monkeypatch.setattr(cuda_mod, "feeds_to_device", to_device)
    for name in ("tolist", "numpy"):                 # kernels reading shape inputs on the host
        original = getattr(torch.Tensor, name)

        def host_read(self, *a, _original=original, _name=name, **k):
            fake.access(self, write=False, what=f"{_name}() on the host", host=True)
            return _original(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, host_read)
    return fake


def _pair(seed: int, k: int, nodes: int = 24, **opts):
    rng = random.Random(seed)
    g = random_graph(rng, nodes, shape=(4, 8), num_inputs=rng.randrange(1, 4))
    single = pyge.compile(g, "cpu", {"ge.enableSingleStream": "true"})
    return single, replan(single, random_streams(k, seed), device="cpu", options=opts)


def _run(fake, ex, feeds, **kw):
    with AccessMode(fake):
        return ex.run(feeds, **kw)


def _same(got, want):
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-6, atol=1e-6)


CASES = [(seed, 2 + seed % 3, "arena" if seed % 2 else "pool") for seed in range(12)]


def test_cases_reuse_physical_events():
    """Some cases bind several Send/Recv pairs to one CUDA event (issue order matters then)."""
    reused = [seed for seed, k, _ in CASES
              if (p := _pair(seed, k)[1].plan).num_physical_events < len(p.events)]
    assert len(reused) >= 3, reused


@pytest.mark.parametrize("seed,k,memory", CASES)
def test_eager_runs_are_race_free(fake, seed, k, memory):
    single, multi = _pair(seed, k, **{"pyge.cudaGraph": "false"})
    assert multi.num_streams > 1
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    for s in (0, 1):                            # two runs: the second's writes meet the first's reads
        feeds = random_feeds(single, s)
        _same(_run(fake, ex, feeds), single.run(feeds))
    out = _run(fake, ex, random_feeds(single, 2), output_device="cuda")
    with AccessMode(fake):                      # the caller's own later work on the outputs
        for t in out.values():
            t.sum()
    assert fake.violations == []


@pytest.mark.parametrize("seed,k,memory", [c for c in CASES if c[0] % 3 == 0])   # pool and arena
def test_capture_is_valid_and_race_free(fake, seed, k, memory):
    single, multi = _pair(seed, k)
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    feeds = random_feeds(single, 0)
    _same(_run(fake, ex, feeds), single.run(feeds))        # warm-up, capture, replay
    assert ex.mode == "graph" and ex.capture_error is None and fake.n_captures == 1
    fake.keep_alive(ex._static_out)
    out = _run(fake, ex, feeds, output_device="cuda")      # copies of the static outputs
    with AccessMode(fake):
        for t in out.values():
            t.sum()
    assert fake.violations == []


LIGHT_CASES = [("squeezenet", 3, "arena", False), ("inception_v1", 4, "arena", True),
               ("inception_v2", 3, "pool", False), ("resnet50", 2, "arena", False),
               ("shufflenet", 4, "pool", True), ("densenet121", 3, "arena", False),
               ("bvlc_alexnet", 2, "pool", False)]


@pytest.mark.parametrize("name,k,memory,graph", LIGHT_CASES)
def test_light_models_are_race_free(fake, name, k, memory, graph):
    single = cached_light_model(name, random=True)
    multi = replan(single, random_streams(k, 7), device="cpu",
                   options={"pyge.cudaGraph": "true" if graph else "false"})
    assert multi.num_streams > 1
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    feeds = random_feeds(single, 0)
    got = _run(fake, ex, feeds)
    assert ex.mode == ("graph" if graph else "eager") and ex.capture_error is None
    errs = relative_errors(got, single.run(feeds))
    assert max(errs.values()) <= 1e-4, errs
    assert fake.violations == []


# -- the sanitizer catches what it is for --------------------------------------------------

def _cross_stream_pair(graph: str = "false"):
    for seed in range(40):
        single, multi = _pair(seed, 3, **{"pyge.cudaGraph": graph})
        if len(multi.plan.events) >= 3:
            return single, multi
    raise AssertionError("no random graph with cross-stream edges")


def test_missing_waits_are_races(fake):
    single, multi = _cross_stream_pair()
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory="pool")
    fake.ignore_waits = True
    _run(fake, ex, random_feeds(single, 0))
    assert any(v.startswith("race: read") for v in fake.violations), fake.violations


def test_missing_record_stream_is_reported(fake, monkeypatch):
    single, multi = _cross_stream_pair()
    monkeypatch.setattr(cuda_mod, "record_use", lambda x, stream: None)
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory="pool")
    _run(fake, ex, random_feeds(single, 0))
    assert any("without record_stream" in v for v in fake.violations), fake.violations


def test_arena_offsets_shared_across_streams_are_races(fake):
    single, multi = _cross_stream_pair()
    mem = multi.plan.memory
    for b in mem.buffers:                # every value at offset 0: unordered streams collide
        b.offset = 0
    mem.peak_bytes = max(b.size for b in mem.buffers)
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory="arena")
    _run(fake, ex, random_feeds(single, 0))
    assert any(v.startswith("race: write") for v in fake.violations), fake.violations


def test_capture_rules():
    """What CUDA refuses in a capture, each reported (the fake alone, no executor)."""
    fake = FakeCuda()
    s0, s1, cap = fake.Stream(), fake.Stream(), fake.Stream()
    before = fake.Event()
    before.record(s1)
    x = torch.ones(4)
    with fake.graph(FakeGraph(fake), stream=cap):
        s0.wait_stream(cap)                       # s0 joins the capture
        fake.access(x, write=True, what="k0", stream=s0)
        s0.wait_event(before)                     # recorded before the capture began
        fake.access(x, write=True, what="k1", stream=s1)   # s1 never joined
    v = fake.violations
    assert any("wait_event(e0) on stream s0 depends on work outside the capture" in m for m in v), v
    assert any("k1 on stream s1, which has not joined the capture" in m for m in v), v
    assert any("stream s0 never joined back" in m for m in v), v

    fake = FakeCuda()
    idle, cap = fake.Stream(), fake.Stream()
    with fake.graph(FakeGraph(fake), stream=cap):
        idle.wait_stream(cap)                     # forked into the capture, no work, not joined
        fake.synchronize()
    assert any("stream s0 never joined back" in m for m in fake.violations), fake.violations
    assert any("synchronize() while capturing" in m for m in fake.violations), fake.violations


def test_views_without_alias_info_keep_their_storage_records():
    """unsafe_chunk's schema does not say its results alias the input: still the same bytes."""
    fake = FakeCuda()
    s1, s2, s3 = fake.Stream(), fake.Stream(), fake.Stream()
    x = torch.zeros(8)
    fake.access(x, write=True, what="init", fresh=True, stream=fake.caller)
    for s in (s1, s2, s3):
        s.wait_stream(fake.caller)
    with fake.stream(s1), AccessMode(fake):
        x.sum()                                   # s1 reads x
    with fake.stream(s2), AccessMode(fake):
        x.unsafe_chunk(2)
    s3.wait_stream(s2)
    with fake.stream(s3), AccessMode(fake):
        x.add_(1)                                 # unordered with s1's read
    assert any(m.startswith("race: write by add_ on stream s2 and read by sum on stream s0")
               for m in fake.violations), fake.violations
    assert not any("record_stream" in m for m in fake.violations), fake.violations


def test_unjoined_capture_is_reported(fake):
    single, multi = _pair(3, 3)
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory="pool")
    fake.ignore_joins_of = "s1"
    _run(fake, ex, random_feeds(single, 0))
    assert any("unjoined" in v for v in fake.violations), fake.violations


def test_a_dead_storage_leaves_no_records():
    """Its address may go to a tensor made outside the dispatcher (from_numpy), which must
    not inherit the old tenant's accesses or allocating stream."""
    fake = FakeCuda()
    s1 = fake.Stream()
    s1.wait_stream(fake.caller)
    with fake.stream(s1), AccessMode(fake):
        t = torch.ones(1024) * 2.0              # allocated and written on s1
    key = t.untyped_storage().data_ptr()
    assert key in fake._alloc and fake._records[key]
    del t
    assert key not in fake._alloc and key not in fake._records


@pytest.fixture(scope="module")
def googlenet_cuda_plan():
    """googlenet (benchmarks/tv_nets.py), compiled for cuda with the candidate CUDA default:
    the plan gpu_bench would run as pyge_default."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import tv_nets
    from pyge.passes.policies.defaults import CUDA_CANDIDATE
    module, size = tv_nets.build("googlenet")
    module.eval()
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    graph = with_intermediates(pyge.from_torch(module, (x,)))
    with pytest.MonkeyPatch.context() as mp:      # compiling for cuda needs a (fake) GPU
        mp.setattr(cuda_mod, "_device", lambda device: torch.device("cpu"))
        multi = pyge.compile(graph, "cuda", dict(CUDA_CANDIDATE))
    single = pyge.compile(graph, "cpu", {"ge.enableSingleStream": "true"})
    return single, multi


@pytest.mark.parametrize("memory", ["pool", "arena"])
def test_the_candidate_cuda_plan_of_googlenet_is_race_free(fake, googlenet_cuda_plan, memory):
    single, multi = googlenet_cuda_plan
    assert multi.num_streams > 1 and multi.plan.events
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    feeds = random_feeds(single, 0)
    got = _run(fake, ex, feeds)                    # warm-up, capture, replay
    assert ex.mode == "graph" and ex.capture_error is None
    errs = relative_errors(got, single.run(feeds))
    assert len(errs) > 10 and max(errs.values()) <= 1e-4, errs     # intermediates too
    assert fake.violations == []


@pytest.mark.parametrize("memory", ["pool", "arena"])
def test_device_outputs_share_no_memory_with_weights_feeds_or_each_other(fake, memory):
    """run(output_device="cuda") without a graph hands over the run's own tensors: an output
    that is a weight, a feed or another output (Identity, Reshape) was that very tensor, so
    the caller writing into it changed the weights of every later run, or its own feed."""
    b = pyge.GraphBuilder("dev_outs")
    x = b.input("x", "float32", (2, 3))
    w = b.initializer("W", np.full((2, 3), 7, np.float32))
    r = b.op("Relu", [x], name="r")
    b.output(b.op("Identity", [w], name="iw"), "w_out")
    b.output(b.op("Identity", [x], name="ix"), "x_out")
    b.output(r, "r_out")
    b.output(b.op("Reshape", [r, b.constant(np.array([3, 2], np.int64))], name="rs"), "r_view")
    b.output(b.op("Add", [x, w], name="add"), "z")
    single = pyge.compile(b.build(), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, {"r": 1, "rs": 1, "ix": 1}, options={"pyge.cudaGraph": "false"})
    ex = cuda_mod.CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    xt = torch.ones(2, 3)
    with AccessMode(fake):
        out = ex.run({"x": xt}, output_device="cuda")
        for t in out.values():
            t.fill_(-1)
    assert (xt == 1).all()
    again = _run(fake, ex, {"x": np.ones((2, 3), np.float32)}, output_device="cuda")
    _same({k: t.numpy() for k, t in again.items()}, single.run({"x": np.ones((2, 3), np.float32)}))
    assert fake.violations == []
