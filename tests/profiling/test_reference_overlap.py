"""The reference picture: before the custom pass Relu_1 and Abs_1 run one after the other on one
stream; after it they run side by side on two, and the trace shows the overlap."""
from __future__ import annotations



from pyge.examples import reference_inputs

from ._helpers import reference_model

RUNS = 12
SHAPE = (2048, 2048)   # 16 MiB per tensor: each op outlasts a thread wake-up on a busy machine


def _overlapping_runs(trace: dict, a: str, b: str) -> tuple[int, set]:
    slices = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            slices.setdefault(e["args"]["run"], {})[e["name"]] = e
    count, tids = 0, set()
    for run in slices.values():
        x, y = run[a], run[b]
        tids.add((x["tid"], y["tid"]))
        if min(x["ts"] + x["dur"], y["ts"] + y["dur"]) > max(x["ts"], y["ts"]):
            count += 1
    return count, tids


def test_before_the_pass_they_run_in_turn():
    prof = reference_model(False, shape=SHAPE).profile(reference_inputs(SHAPE), runs=RUNS)
    count, tids = _overlapping_runs(prof.to_chrome_trace(), "Relu_1", "Abs_1")
    assert count == 0 and tids == {(0, 0)}
    assert prof.overlap("Relu_1", "Abs_1") == 0.0


def test_after_the_pass_they_run_side_by_side():
    model = reference_model(True, shape=SHAPE)
    assert model.num_streams == 2
    prof = model.profile(reference_inputs(SHAPE), runs=RUNS)
    count, tids = _overlapping_runs(prof.to_chrome_trace(), "Relu_1", "Abs_1")
    assert tids == {(model.stream_of("Relu_1"), model.stream_of("Abs_1"))}
    # Wall-clock intervals overlap whenever both stream threads are inside their kernels, even
    # time-sliced on a busy machine; only a late wake-up of the worker thread can prevent it.
    assert count >= RUNS // 3, f"only {count} of {RUNS} runs overlapped"
    shorter = min(min(prof.durations("Relu_1")), min(prof.durations("Abs_1")))
    best = max(prof.overlap("Relu_1", "Abs_1", run=r) for r in range(RUNS))
    assert best >= 0.5 * shorter
