"""Every pass contract condition (passes/conditions.py) holds after a compilation and catches
the state it is there to catch, naming the culprit."""
from __future__ import annotations

import copy

import pytest

import pyge
from pyge.compiler import run_graph_passes, run_model_passes
from pyge.examples import PASS_NAME, reference_graph, split_abs
from pyge.options import parse_options
from pyge.passes import conditions as C
from pyge.passes.pipeline import CompileState
from pyge.plan.plan import LAUNCH, WAIT, Step

ALL = [C.OWNED, C.ACYCLIC, C.WELL_FORMED, C.OPS_SUPPORTED, C.ENGINES_ASSIGNED,
       C.STREAMS_ASSIGNED, C.DENSE_STREAMS, C.STREAMS_IN_RANGE, C.PLAN_BUILT, C.EVENTS_PLACED,
       C.EVENT_IDS_DENSE, C.MEMORY_PLANNED, C.COLLECTIVES_CHAINED, C.PLAN_VERIFIES]


def compiled_state() -> CompileState:
    """The reference example compiled with its custom pass: two streams, one event."""
    g = reference_graph()
    st = CompileState(graph=g, options=parse_options(None), source=g)
    with pyge.custom_passes_scope():
        pyge.register_custom_pass(PASS_NAME).custom_allocate_stream_pass_fn(split_abs)
        run_graph_passes(st)
        run_model_passes(st)
    return st


@pytest.fixture
def st():
    return compiled_state()


def test_all_hold_after_a_compilation(st):
    assert st.num_streams == 2 and len(st.plan.events) == 1
    assert {c.name: c(st) for c in ALL} == {c.name: None for c in ALL}
    assert C.NO_EVENTS_YET(st) == "plan 'reference' already has 1 events"


def _node(st, name):
    return st.graph.node(name)


def test_owned(st):
    st.graph = st.source
    assert "is the caller's" in C.OWNED(st)


def test_acyclic(st):
    _node(st, "Relu_1").control_preds.append(_node(st, "Add_1"))
    assert "cycle" in C.ACYCLIC(st)


def test_well_formed_use_lists(st):
    add = _node(st, "Add_1")
    add.inputs[0].uses.clear()
    assert "node 'Add_1' reads" in C.WELL_FORMED(st) and "does not list that use" in C.WELL_FORMED(st)


def test_well_formed_producers(st):
    _node(st, "Abs_1").outputs[0].producer = _node(st, "Relu_1")
    assert "output 0 of node 'Abs_1'" in C.WELL_FORMED(st)


def test_well_formed_names(st):
    _node(st, "Relu_1").name = "Abs_1"
    assert "two nodes named 'Abs_1'" in C.WELL_FORMED(st)


def test_well_formed_outputs(st):
    st.graph.outputs.append(pyge.Value("nowhere"))
    assert "output 'nowhere' is defined nowhere" in C.WELL_FORMED(st)


def test_ops_supported(st):
    _node(st, "Abs_1").op_type = "NoSuchOp"
    assert C.OPS_SUPPORTED(st) == "operator NoSuchOp (node 'Abs_1') has no kernel"


def test_engines_assigned(st):
    _node(st, "Abs_1").engine = None
    assert "node 'Abs_1' (Abs)" in C.ENGINES_ASSIGNED(st)


def test_streams_assigned(st):
    _node(st, "Abs_1").stream_id = -1
    assert "has stream -1" in C.STREAMS_ASSIGNED(st)


def test_dense_streams(st):
    _node(st, "Abs_1").stream_id = 5
    assert "are not 0..1" in C.DENSE_STREAMS(st)
    _node(st, "Abs_1").stream_id = 1
    st.num_streams = 3
    assert "counts 3 streams" in C.DENSE_STREAMS(st)


def test_streams_in_range(st):
    _node(st, "Abs_1").stream_id = 2
    assert C.STREAMS_IN_RANGE(st) == "node 'Abs_1' has stream 2, outside 0..1"


def test_plan_built(st):
    st.plan.streams[0].append(copy.copy(next(x for x in st.plan.streams[0] if x.kind == LAUNCH)))
    assert "is launched 2 times" in C.PLAN_BUILT(st)
    st.plan = None
    assert C.PLAN_BUILT(st) == "there is no plan"


def test_events_placed(st):
    st.plan.streams = [[x for x in s if x.kind != WAIT] for s in st.plan.streams]
    assert "0 WAITs" in C.EVENTS_PLACED(st)
    st.plan.streams[0].append(Step(WAIT, 9))
    assert "event #9, which does not exist" in C.EVENTS_PLACED(st)


def test_event_ids_dense(st):
    st.plan.events[0].event_id = 7
    assert "[7] are not 0..0" in C.EVENT_IDS_DENSE(st)


def test_memory_planned(st):
    v = next(v for v in st.plan.values if v.buffer >= 0)
    v.buffer = 99
    assert f"value {v.name!r} has buffer 99" in C.MEMORY_PLANNED(st)
    v.buffer = -1
    assert "has a static size but no buffer" in C.MEMORY_PLANNED(st)


def test_collectives_chained(st):
    st.plan.meta.pop("collectives")
    assert C.COLLECTIVES_CHAINED(st) == "plan 'reference' does not list its collectives"
    abs_1, add_1 = (st.plan.node_index()[n] for n in ("Abs_1", "Add_1"))
    st.plan.meta["collectives"] = [abs_1, add_1]        # as if they were collectives
    assert "'Abs_1'@s1 and 'Add_1'@s0 are not chained" in C.COLLECTIVES_CHAINED(st)


def test_plan_verifies(st):
    st.plan.streams = [[x for x in s if x.kind == LAUNCH] for s in st.plan.streams]
    st.plan.events = []
    assert "unordered data dependency" in C.PLAN_VERIFIES(st)


def test_ops_supported_after_check_ops_reuses_its_walk_once():
    """check_ops leaves a one-shot note for its postcondition; any later check of
    OPS_SUPPORTED walks the graph again (an op renamed by plain assignment moves no
    version) and names the culprit."""
    import pyge
    from pyge.compiler import _check_ops
    from pyge.passes.conditions import OPS_CHECKED, OPS_SUPPORTED
    from pyge.passes.pipeline import CompileState
    from pyge.options import parse_options
    b = pyge.GraphBuilder("g")
    b.output(b.op("Relu", [b.input("x", "float32", (2,))], name="r"), "y")
    st = CompileState(graph=b.build(), options=parse_options(None))
    _check_ops(st)
    assert OPS_CHECKED in st.graph._derived
    st.graph.nodes[0].op_type = "NoSuchOp"      # after the pass, by plain assignment
    assert OPS_SUPPORTED(st) is None              # the note: the pass's own walk
    assert "NoSuchOp" in OPS_SUPPORTED(st)        # taken once: walked again
