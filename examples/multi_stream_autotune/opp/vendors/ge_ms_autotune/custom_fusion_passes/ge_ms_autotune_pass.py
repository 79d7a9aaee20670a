"""GE's multi-stream autotune pass, as a pyge plugin: environment variable -> graph attribute.

A driver (../../../../run.py) tries candidate stream modes without touching the workload: it
puts the candidate in $GE_AUTO_MULTISTREAM_PARALLEL_MODE, and this pass, run before shape
inference, writes it onto the graph as `ge.autoMultistreamParallelMode`, which overrides the
option of that name. The variable is a contract between this pass and its driver; pyge itself
never reads it. Unset or empty, the pass changes nothing (the "default" candidate).

GE's sample also sets `_auto_multistream_tuning_mode`, which makes GE log a timing record per
run; pyge has no such records (the driver times the runs itself), so the pass does not set it.
"""
import os

import pyge

MODE_ATTR = "ge.autoMultistreamParallelMode"
MODE_ENV = "GE_AUTO_MULTISTREAM_PARALLEL_MODE"


def ge_ms_autotune(graph, ctx):
    mode = os.environ.get(MODE_ENV, "")
    if mode:
        graph.set_attr(MODE_ATTR, mode)   # a bad value fails compilation as this pass's error
    return pyge.GRAPH_SUCCESS


pyge.register_custom_pass("GeMsAutotunePass").custom_pass_fn(ge_ms_autotune) \
    .stage(pyge.CustomPassStage.kBeforeInferShape)
