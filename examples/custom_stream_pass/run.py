"""The reference example of a custom stream pass, end to end.

    python examples/custom_stream_pass/run.py

Relu_1 and Abs_1 do not depend on each other, yet GE's default rules put them on one stream.
The pass SplitAbs (pyge.examples.split_abs, ten lines) gives Abs_1 a stream of its own; the
compiled model then has two streams, a Send/Recv pair from Abs_1 to Add_1, and computes the
same numbers as the single-stream run. Set DUMP_GE_GRAPH=1 to get the before/after dumps.
"""
from __future__ import annotations

import numpy as np

import pyge
from pyge.examples import PASS_NAME, reference_graph, reference_inputs, split_abs


def describe(title: str, model: pyge.CompiledModel) -> None:
    print(f"{title}: {model.num_streams} stream(s)")
    for s, names in enumerate(model.streams):
        print(f"  stream {s}: {', '.join(names)}")
    for e in model.events:
        print(f"  event {e.event_id}: {e.src} (stream {e.src_stream}) -> {e.dst} (stream {e.dst_stream})")


def main() -> int:
    graph = reference_graph()
    feeds = reference_inputs()
    default = pyge.compile(graph)
    describe("default rules", default)
    single = pyge.compile(graph, options={"ge.enableSingleStream": "true"})
    with pyge.custom_passes_scope():   # the pass is registered only for this compilation
        pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        custom = pyge.compile(graph)
    describe(f"with custom pass {PASS_NAME}", custom)
    print(f"Abs_1: stream {default.stream_of('Abs_1')} -> {custom.stream_of('Abs_1')}; "
          f"streams from custom passes: {custom.custom_streams}")
    same = np.array_equal(custom.run(feeds)["output"], single.run(feeds)["output"])
    print("outputs identical to the single-stream run:", same)
    return 0 if same and custom.num_streams == 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
