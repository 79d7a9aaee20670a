"""What pyge.compile leaves of the cyclic garbage collector's state (compiler._collector_paused)."""
from __future__ import annotations

import gc
import weakref

import pyge
from pyge.examples import reference_graph

OPTS = {"ge.autoMultistreamParallelMode": "LoadBalance:4"}


class _Cycle:
    def __init__(self):
        self.me = self


def _chain(n: int) -> pyge.Graph:
    b = pyge.GraphBuilder("chain")
    v = b.input("x", "float32", (2, 3))
    for i in range(n):
        v = b.op("Relu" if i % 2 else "Neg", [v], name=f"n{i}")
    b.output(v, "y")
    return b.build()


def _young(obj) -> bool:
    return any(o is obj for gen in (0, 1) for o in gc.get_objects(generation=gen))


def test_the_compiles_objects_leave_the_young_generations():
    g = _chain(3000)
    gc.collect()
    m = pyge.compile(g, options=OPTS)
    # Without the promotion, the compile's survivors (tens of thousands here) would wait in
    # generation 0 for the first young collection to walk them, then in generation 1.
    assert not _young(m.plan) and not _young(m.plan.nodes[0])
    assert gc.isenabled()


def test_a_callers_garbage_cycle_is_still_collected_young():
    gc.collect()
    cycle = _Cycle()
    gone = weakref.ref(cycle)
    del cycle
    pyge.compile(reference_graph(), options=OPTS)
    gc.collect(1)   # a young collection: the cycle must not have been promoted past it
    assert gone() is None


def test_the_collector_stays_off_when_the_caller_turned_it_off():
    gc.disable()
    try:
        pyge.compile(reference_graph(), options=OPTS)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_callers_frozen_objects_stay_frozen():
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        pyge.compile(reference_graph(), options=OPTS)
        assert gc.get_freeze_count() == frozen
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_failing_compile_turns_the_collector_back_on(monkeypatch):
    from pyge import compiler

    def broken(st):
        raise pyge.PygeError("a pass failed")
    monkeypatch.setattr(compiler, "run_model_passes", broken)
    g = _chain(3000)
    gc.collect()
    try:
        pyge.compile(g, options=OPTS)
    except pyge.PygeError as err:
        assert "a pass failed" in str(err)
    else:
        raise AssertionError("the compile should have failed")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_compile_leaves_no_garbage_cycle():
    # The stream passes' read-only view and its node wrappers referenced each other: one
    # cycle per compile, of one object per node, that only the cyclic GC could free.
    g = _chain(300)
    gc.collect()
    gc.disable()
    try:
        m = pyge.compile(g, options=OPTS)
        assert gc.collect() == 0          # (the model, alive, holds the graph and plan)
        assert m.num_streams >= 1
    finally:
        gc.enable()
