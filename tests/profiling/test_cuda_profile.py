"""Profiling on CUDA (skipped without a GPU)."""
from __future__ import annotations

import pytest

from pyge.profiling.cuda import executor_streams, uses_graph

from ._helpers import feeds, reference_model


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
