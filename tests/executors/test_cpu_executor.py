"""The threaded CPU executor: multi-stream runs give single-stream numbers."""
from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyge
from pyge.executors import make_executor
from pyge.executors.cpu import CpuExecutor, intra_op_threads, side_threads
from pyge.executors.sequential import SequentialExecutor

from .helpers import (branch_streams, cached_light_model, random_feeds, random_graph,
                      random_streams, replan)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6, err_msg=k)


def _with_threads(n: int, fn):
    saved = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        return fn()
    finally:
        torch.set_num_threads(saved)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), nodes=st.integers(1, 24), k=st.integers(2, 5),
       arena=st.booleans())
def test_random_graphs_random_streams(seed, nodes, k, arena):
    rng = random.Random(seed)
    single = pyge.compile(random_graph(rng, nodes), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(k, seed))
    feeds = random_feeds(single, seed)
    ex = CpuExecutor(multi.graph, multi.plan, "cpu", multi.options, arena=arena)
    try:
        for _ in range(2):                      # the second run reuses the worker threads
            _same(ex.run(feeds), single.run(feeds))
    finally:
        ex.close()


LIGHT_CASES = [
    ("inception_v1", branch_streams(3)),
    ("inception_v1", random_streams(4, 7)),
    ("resnet50", branch_streams(2)),
    ("squeezenet", random_streams(3, 1)),
    ("shufflenet", random_streams(4, 2)),
    ("inception_v2", branch_streams(4)),
    ("densenet121", random_streams(3, 5)),
    ("bvlc_alexnet", random_streams(2, 3)),
    ("vgg19", random_streams(2, 4)),
    ("zfnet512", random_streams(3, 6)),
]


@pytest.mark.parametrize("name,assign", LIGHT_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LIGHT_CASES)])
def test_light_models_multi_equals_single(name, assign):
    single = cached_light_model(name, random=True)
    multi = replan(single, assign)
    assert multi.num_streams > 1
    ex = multi.executor
    assert isinstance(ex, CpuExecutor)
    feeds = random_feeds(single)
    got = multi.run(feeds)
    # Same intra-op thread count as the stream workers, so reductions add in the same order.
    want = _with_threads(ex.threads, lambda: single.run(feeds))
    _same(got, want)


def test_light_model_with_arena_matches():
    single = cached_light_model("inception_v1", random=True)
    multi = replan(single, branch_streams(4))
    ex = CpuExecutor(multi.graph, multi.plan, "cpu", multi.options, arena=True)
    feeds = random_feeds(single, 3)
    want = _with_threads(ex.threads, lambda: single.run(feeds))
    for k, v in ex.run(feeds).items():
        np.testing.assert_allclose(v, want[k], rtol=1e-4, atol=1e-6)
    ex.close()



def test_arena_runs_after_the_first_see_new_weights_and_batchnorm_parameters():
    """A Conv weight and BatchNorm parameters computed in the graph are planned values:
    the arena hands their kernels the same view object every run, with new contents.
    The kernels' packed weight and folded affine must follow (they went stale after run 1)."""
    b = pyge.GraphBuilder("arena_params")
    x = b.input("x", "float32", (1, 3, 6, 6))
    w = b.input("w", "float32", (4, 3, 3, 3))
    p = b.input("p", "float32", (4,))
    conv = b.op("Conv", [x, b.op("Relu", [w], name="wr")], name="conv", pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", [conv, b.op("Abs", [p], name="sc"), b.op("Neg", [p], name="bi"),
                                    b.op("Sigmoid", [p], name="mu"), b.op("Exp", [p], name="va")],
             name="bn")
    b.output(y, "y")
    single = pyge.compile(b.build(), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, {"wr": 1, "sc": 1, "mu": 1})
    ex = CpuExecutor(multi.graph, multi.plan, "cpu", multi.options, arena=True)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
                 "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                 "p": rng.standard_normal(4).astype(np.float32)}
        np.testing.assert_allclose(ex.run(feeds)["y"], single.run(feeds)["y"], rtol=1e-4, atol=1e-5)
    ex.close()

def test_dispatch_and_thread_policy():
    single = cached_light_model("squeezenet")
    assert isinstance(make_executor(single.graph, single.plan, "cpu"), SequentialExecutor)
    multi = replan(single, branch_streams(2))
    assert isinstance(make_executor(multi.graph, multi.plan, "cpu"), CpuExecutor)
    assert intra_op_threads(2, 2.0) == 1       # two streams busy all the time: split
    assert intra_op_threads(2, 4.0) == 1
    assert intra_op_threads(2, 1.3) == 2       # side streams mostly idle: keep the cores
    assert intra_op_threads(16, 4.0) == 4
    assert intra_op_threads(16, 4.0, forced=3) == 3
    forced = replan(single, branch_streams(2), options={"pyge.intraOpThreads": "1"})
    assert forced.executor.threads == 1 and forced.executor.side_threads == 1
    # Side streams get what the main stream leaves, at least one thread: on 2 cores a second
    # OpenMP team would cut every team's spin-wait (see cpu.py).
    assert side_threads(2, 2, 1) == 1 and side_threads(16, 13, 1) == 3 and side_threads(16, 4, 3) == 4
    assert side_threads(2, 2, 1, forced=2) == 2


def test_threads_reused_and_setting_restored():
    rng = random.Random(5)
    single = pyge.compile(random_graph(rng, 20), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(3, 5))
    feeds = random_feeds(single)
    before_threads = torch.get_num_threads()
    multi.run(feeds)
    count = threading.active_count()
    for _ in range(5):
        multi.run(feeds)
    assert threading.active_count() == count          # no thread per run
    assert torch.get_num_threads() == before_threads   # intra-op setting restored
    workers = multi.executor.worker_threads()
    assert len(workers) == len(multi.executor.busy) - 1
    multi.executor.close()
    for t in workers:
        assert not t.is_alive()


class _Hooks:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls: list[tuple] = []

    def _add(self, *item):
        with self.lock:
            self.calls.append(item + (threading.current_thread().name,))

    def before(self, node, stream):
        self._add("before", node, stream)

    def after(self, node, stream):
        self._add("after", node, stream)

    def record(self, event, stream):
        self._add("record", event, stream)

    def wait(self, event, stream):
        self._add("wait", event, stream)


def test_hooks_called_on_each_stream_thread():
    rng = random.Random(11)
    single = pyge.compile(random_graph(rng, 16), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(3, 11))
    hooks = _Hooks()
    _same(multi.executor.run(random_feeds(single), hooks=hooks), single.run(random_feeds(single)))
    plan = multi.plan
    befores = [c for c in hooks.calls if c[0] == "before"]
    assert sorted(c[1] for c in befores) == list(range(len(plan.nodes)))
    assert len([c for c in hooks.calls if c[0] == "after"]) == len(plan.nodes)
    for _, node, stream, _ in befores:
        assert plan.nodes[node].stream == stream
    thread_of = {}
    for _, _, stream, thread in hooks.calls:
        assert thread_of.setdefault(stream, thread) == thread   # one thread per stream
    assert len(set(thread_of.values())) == len(thread_of)
    assert len([c for c in hooks.calls if c[0] == "record"]) == len(plan.events)
    assert len([c for c in hooks.calls if c[0] == "wait"]) == len(plan.events)


def test_single_stream_honours_intra_op_threads():
    from pyge.kernels import register
    seen = []

    @register("TestSeeThreads", domain="pyge.test")
    def _see(ctx):
        return lambda xs: (seen.append(torch.get_num_threads()), [xs[0] * 2.0])[1]
    b = pyge.GraphBuilder("threads")
    x = b.input("x", "float32", (3,))
    b.output(b.op("TestSeeThreads", [x], name="see", domain="pyge.test"), "y")
    g = b.build()
    feeds = {"x": np.ones(3, np.float32)}

    def go():
        pyge.compile(g, "cpu", {"pyge.intraOpThreads": "1"}).run(feeds)
        pyge.compile(g, "cpu").run(feeds)
        return torch.get_num_threads()
    assert _with_threads(2, go) == 2          # the caller's setting is back
    assert seen == [1, 2]
