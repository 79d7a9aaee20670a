"""One rank of a collectives scenario (started by ranks.launch; not a test module).

    python rank_worker.py SCENARIO FOLDER      # RANK, WORLD_SIZE, MASTER_* set by the launcher

Each step's outcome (ok, error, and what the step measured) goes to FOLDER/rank<R>.json as
soon as the step ends; the tests assert on those files. No step initialises the process
group by hand before the first compile: pyge does it from the environment, as under torchrun.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import pyge
from pyge import tensor_parallel as tp

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
OUT = Path(sys.argv[2]) / f"rank{RANK}.json"
SHAPE = tp.BlockShape(batch=16, model=32, hidden=64, branch=48)
MS = "com.microsoft"
RESULTS: dict = {}


def step(fn):
    t0 = time.monotonic()
    try:
        RESULTS[fn.__name__] = {"ok": True, **(fn() or {})}
    except BaseException as err:  # noqa: BLE001 - recorded for the test to show
        RESULTS[fn.__name__] = {"ok": False, "error": f"{type(err).__name__}: {err}",
                                "trace": traceback.format_exc()[-2000:]}
    RESULTS[fn.__name__]["seconds"] = time.monotonic() - t0
    OUT.write_text(json.dumps(RESULTS, indent=1, default=str))
    return fn


def client_store() -> dist.TCPStore:
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD,
                         is_master=False, timeout=timedelta(seconds=60))


def max_err(got: dict, want: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k]))) for k in want)


# -- the tensor-parallel block against the unsharded model -----------------------------------
def tp_block():
    x = tp.block_inputs(SHAPE)
    ref = tp.reference(x["x"], tp.full_weights(SHAPE))
    model = pyge.compile(tp.block_graph(SHAPE, RANK, WORLD))       # initialises the group
    single = pyge.compile(tp.block_graph(SHAPE, RANK, WORLD), options={"ge.enableSingleStream": "true"})
    out = model.run(x)
    from pyge.kernels.collective_group import initialised_by_pyge
    return {"err": max_err(out, ref), "single_err": max_err(single.run(x), ref),
            "streams": model.streams, "ar_stream": model.stream_of("AllReduce"),
            "mm_stream": model.stream_of("RowParallel_MatMul"),
            "branch_stream": model.stream_of("Branch_MatMul_1"),
            "init_by_pyge": initialised_by_pyge(dist.group.WORLD), "backend": dist.get_backend()}


# -- AllReduce (variadic), AllGather (axis 1, bool), AllToAll against numpy ---------------------
def _op_feeds(r: int) -> dict:
    return {"a": np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * r,
            "c": np.linspace(0, 1, 4) * (r + 1),
            "t": np.arange(12, dtype=np.int64).reshape(4, 3) + 100 * r,
            "flag": np.array([r == 0, r == 1, True])}


def ops():
    b = pyge.GraphBuilder("ops")
    a, c = b.input("a", "float32", (2, 3)), b.input("c", "float64", (4,))
    t, flag = b.input("t", "int64", (4, 3)), b.input("flag", "bool", (3,))
    s1, s2 = b.op("AllReduce", [a, c], name="ar", num_outputs=2, domain=MS)
    g = b.op("AllGather", [a], name="ag", domain=MS, group_size=WORLD, axis=1)
    f = b.op("AllGather", [flag], name="agb", domain=MS, group_size=WORLD)
    x = b.op("AllToAll", [t], name="a2a", domain=MS, group_size=WORLD)
    for v, name in ((s1, "s1"), (s2, "s2"), (g, "g"), (f, "f"), (x, "x")):
        b.output(v, name)
    out = pyge.compile(b.build()).run(_op_feeds(RANK))
    every = [_op_feeds(r) for r in range(WORLD)]
    n = every[0]["t"].size // WORLD
    want = {"s1": sum(e["a"] for e in every), "s2": sum(e["c"] for e in every),
            "g": np.concatenate([e["a"] for e in every], axis=1),
            "f": np.concatenate([e["flag"] for e in every]),
            "x": np.concatenate([e["t"].reshape(-1)[RANK * n:(RANK + 1) * n] for e in every]).reshape(4, 3)}
    bad = [k for k in want if not (np.array_equal(out[k], want[k]) or
                                   np.allclose(out[k], want[k], rtol=1e-6))]
    return {"bad": bad, "dtypes": {k: str(v.dtype) for k, v in out.items()}}


# -- from_torch: torch.export of modules calling the functional collectives -----------------
def torch_export():
    import torch.distributed._functional_collectives as fc
    x = torch.from_numpy(tp.block_inputs(SHAPE)["x"])
    mod = tp.torch_block(SHAPE, RANK, WORLD)
    eager = [t.numpy() for t in mod(x)]
    g = pyge.from_torch(mod, (x,))
    out = pyge.compile(g).run({"x": x.numpy()})
    ref = tp.reference(x.numpy(), tp.full_weights(SHAPE))

    class Others(torch.nn.Module):
        def forward(self, y):
            return (fc.all_gather_tensor(y, 0, dist.group.WORLD),
                    fc.all_to_all_single(y, None, None, dist.group.WORLD),
                    fc.all_reduce(y, "avg", dist.group.WORLD))
    y = torch.arange(12, dtype=torch.float32).reshape(4, 3) + RANK
    g2 = pyge.from_torch(Others(), (y,))
    got = pyge.compile(g2).run({"y": y.numpy()})
    want = [t.numpy() for t in Others()(y)]
    return {"ops": sorted({f"{n.domain}:{n.op_type}" for n in g.nodes}),
            "ops2": sorted({f"{n.domain}:{n.op_type}" for n in g2.nodes}),
            "vs_eager": max(float(np.max(np.abs(out[f"output_{i}"] - eager[i]))) for i in range(2)),
            "vs_ref": max(float(np.max(np.abs(out["output_0"] - ref["mlp"]))),
                          float(np.max(np.abs(out["output_1"] - ref["out"])))),
            "others": max(float(np.max(np.abs(got[f"output_{i}"] - want[i]))) for i in range(3))}


# -- two collectives on two streams: one issue order on every rank --------------------------
CHAIN = 24


def _order_graph(r: int) -> pyge.Graph:
    """A and B on streams of their own (labels). The heavy chain feeds A on rank 0 and B on
    rank 1, so without an order rank 0 would issue B first and rank 1 A first."""
    b = pyge.GraphBuilder(f"order_r{r}")
    x = b.input("x", "float32", (64, 64))
    w = b.initializer("w", (np.eye(64) * 0.5).astype(np.float32))
    h = x
    for i in range(CHAIN):
        h = b.op("Tanh", [b.op("MatMul", [h, w], name=f"mm{i}")], name=f"tanh{i}")
    first, second = (h, x) if r == 0 else (x, h)
    b.output(b.op("AllReduce", [first], name="A", domain=MS, _stream_label="commA"), "a")
    b.output(b.op("AllReduce", [second], name="B", domain=MS, _stream_label="commB"), "b")
    return b.build()


def _order_expected(x: np.ndarray) -> dict:
    h = x.astype(np.float64)
    for _ in range(CHAIN):
        h = np.tanh(h * 0.5)
    ins = [(h, x) if r == 0 else (x, h) for r in range(WORLD)]
    return {"a": sum(i[0] for i in ins), "b": sum(i[1] for i in ins)}


def order():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    want = _order_expected(x)
    model = pyge.compile(_order_graph(RANK))
    model.verify()
    ok_runs = sum(max_err(model.run({"x": x}), want) < 1e-4 for _ in range(5))
    edge = [str(e) for e in model.events if {e.src, e.dst} == {"A", "B"}]
    # The same plan without the order (and without the verifier, which would refuse it).
    # (its contract asks for the list of collectives: an empty one; and no invariant checks,
    # which would refuse the plan as verify() does)
    import pyge.passes.sync.collectives as pc

    def no_order(plan, graph):
        plan.meta["collectives"] = []
        return 0
    saved, pc.order_collectives = pc.order_collectives, no_order
    checks = os.environ.pop("PYGE_CHECK_INVARIANTS", None)
    try:
        loose = pyge.compile(_order_graph(RANK), options={"pyge.verify": "false"})
    finally:
        pc.order_collectives = saved
        if checks is not None:
            os.environ["PYGE_CHECK_INVARIANTS"] = checks
    try:
        loose.verify()
        refused = ""
    except pyge.VerificationError as err:
        refused = str(err)
    loose_ok = sum(max_err(loose.run({"x": x}), want) < 1e-4 for _ in range(3))
    return {"streams": [model.stream_of("A"), model.stream_of("B")], "edge": edge,
            "ok_runs": ok_runs, "loose_refused": refused, "loose_ok_runs": loose_ok}


# -- a timed-out collective, then a fresh group -------------------------------------------------
def _small_graph(name: str = "small") -> pyge.Graph:
    b = pyge.GraphBuilder(name)
    x = b.input("x", "float32", (8,))
    b.output(b.op("AllReduce", [b.op("Relu", [x], name="relu")], name="lonely_AllReduce",
                  domain=MS), "y")
    return b.build()


def timeout():
    store = client_store()
    model = pyge.compile(_small_graph(), options={"pyge.collectiveTimeout": "2"})
    res = {}
    if RANK == 0:          # rank 1 never issues this collective
        for key in ("first", "again"):
            t0 = time.monotonic()
            try:
                model.run({"x": np.ones(8, np.float32)})
                res[key] = "no error"
            except pyge.ExecutionError as err:
                res[key] = str(err)
            res[key + "_s"] = time.monotonic() - t0
        store.set("timed_out", "1")
    else:
        store.wait(["timed_out"], timedelta(seconds=60))
    t0 = time.monotonic()
    dist.destroy_process_group()
    res["destroy_s"] = time.monotonic() - t0
    return res


def fresh_group():
    store = client_store()
    dist.init_process_group("gloo", store=dist.PrefixStore("fresh", store), rank=RANK,
                            world_size=WORLD, timeout=timedelta(seconds=30))
    x = tp.block_inputs(SHAPE)
    out = pyge.compile(tp.block_graph(SHAPE, RANK, WORLD)).run(x)
    return {"err": max_err(out, tp.reference(x["x"], tp.full_weights(SHAPE)))}


# -- a rank that dies ---------------------------------------------------------------------------
def dead_rank():
    """Rank 1 dies while rank 0 waits in the AllReduce of the block (several streams)."""
    store = client_store()
    model = pyge.compile(tp.block_graph(SHAPE, RANK, WORLD), options={"pyge.collectiveTimeout": "30"})
    x = tp.block_inputs(SHAPE)
    model.run(x)
    if RANK == 1:
        store.wait(["running0"], timedelta(seconds=60))
        time.sleep(0.5)        # rank 0 is inside its AllReduce by now
        OUT.write_text(json.dumps({**RESULTS, "dead_rank": {"ok": True, "exiting": True}}))
        os._exit(17)           # no clean-up: as a crash would leave it
    store.set("running0", "1")
    t0 = time.monotonic()
    try:
        model.run(x)
        msg = "no error"
    except pyge.ExecutionError as err:
        msg = str(err)
    return {"error_msg": msg, "error_s": time.monotonic() - t0}


def alone_afterwards():
    t0 = time.monotonic()
    dist.destroy_process_group()
    destroy_s = time.monotonic() - t0
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    x = tp.block_inputs(SHAPE)
    out = pyge.compile(tp.block_graph(SHAPE, 0, 1)).run(x)
    return {"destroy_s": destroy_s, "err": max_err(out, tp.reference(x["x"], tp.full_weights(SHAPE)))}


SCENARIOS = {"main": [tp_block, ops, torch_export, order, timeout, fresh_group],
             "dead": [dead_rank, alone_afterwards]}

if __name__ == "__main__":
    torch.set_num_threads(1)
    for fn in SCENARIOS[sys.argv[1]]:
        step(fn)
        if not RESULTS[fn.__name__]["ok"] and fn.__name__ in ("tp_block", "dead_rank"):
            break             # the rest needs a working group
    if dist.is_initialized():
        dist.destroy_process_group()
