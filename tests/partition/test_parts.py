"""What users see of a partitioned model: the parts, their names, the custom stream pass once
per part, dumps per part (root first), .pgm round trips and `pyge streams`."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import pyge
from pyge import GRAPH_SUCCESS

from . import models
from .conftest import graph_of


def test_a_fully_static_model_is_one_static_part_and_not_partitioned():
    m = pyge.compile(graph_of("static_chain"), "cpu")
    assert not m.partitioned
    [part] = m.submodels
    assert (part.name, part.kind) == ("plain", "static")
    assert part.streams == m.streams and part.num_streams == m.num_streams


def test_parts_are_named_deterministically_in_execution_order():
    names = [[p.name for p in pyge.compile(graph_of("detection"), "cpu").submodels] for _ in range(2)]
    assert names[0] == names[1] == ["det", "det_static_0", "det_static_1"]


@pytest.mark.parametrize("limit, kinds", [("4", ["dynamic", "static", "static"]),
                                          ("6", ["dynamic", "static"]),
                                          ("7", ["dynamic"]), ("-1", ["dynamic"])])
def test_the_lower_limit_sends_small_clusters_to_the_dynamic_part(limit, kinds):
    m = pyge.compile(graph_of("detection"), "cpu", {"ge.exec.static_model_ops_lower_limit": limit})
    assert [p.kind for p in m.submodels] == kinds
    total = sum(len([s for s in p.plan.nodes if s.name.startswith("PartitionedCall") is False])
                for p in m.submodels)
    assert total == 14          # every node of the graph is in exactly one part
    feeds = models.FEEDS["det"](np.random.default_rng(0))
    ref = pyge.compile(graph_of("detection"), "cpu", {"ge.exec.static_model_ops_lower_limit": "-1"})
    np.testing.assert_allclose(m.run(feeds)["picked"], ref.run(feeds)["picked"])


@pytest.mark.parametrize("raw", ["-2", "four", ""])
def test_a_bad_lower_limit_is_refused_naming_the_option(raw):
    with pytest.raises(pyge.OptionError, match="static_model_ops_lower_limit"):
        pyge.compile(graph_of("detection"), "cpu", {"ge.exec.static_model_ops_lower_limit": raw})


def test_model_wide_views_cover_every_part(tmp_path):
    m = pyge.compile(graph_of("detection"), "cpu", {"ge.streamMaxParallelNum": "3",
                                                    "pyge.streamAllocation": "nodes"})
    assert m.num_streams == sum(p.num_streams for p in m.submodels)
    seen = [n for s in m.streams for n in s]
    for p in m.submodels:
        for k, names in enumerate(p.streams):
            for n in names:
                if not n.startswith("PartitionedCall"):
                    assert m.stream_of(n) == p.stream_offset + k
    assert {"nms", "box_mm", "score_sig"} <= set(seen)
    assert len(m.events) >= sum(len(p.events) for p in m.submodels)
    m.verify()
    prof = m.profile(models.FEEDS["det"](np.random.default_rng(0)), runs=2)
    by_name = {r.name: r.stream for r in prof.records}
    assert {"nms", "box_mm", "score_sig"} <= set(by_name)
    assert all(by_name[n] == m.stream_of(n) for n in ("nms", "box_mm", "score_sig"))
    assert not any(n.startswith("PartitionedCall") for n in by_name)   # its sub-model's ops instead
    prof.save_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    tids = {e["name"]: e["tid"] for e in events if e.get("ph") == "X"}
    assert all(tids[n] == m.stream_of(n) for n in ("nms", "box_mm", "score_sig"))


@pytest.mark.usefixtures("no_custom_passes")
def test_the_custom_stream_pass_runs_once_per_part(monkeypatch, tmp_path):
    seen = []

    def split(graph, ctx):
        seen.append(sorted(n.name for n in graph.get_direct_nodes()))
        return GRAPH_SUCCESS

    pyge.register_custom_pass("Split").custom_allocate_stream_pass_fn(split)
    monkeypatch.setenv("DUMP_GE_GRAPH", "3")
    monkeypatch.setenv("DUMP_GRAPH_PATH", str(tmp_path))
    monkeypatch.setenv("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM", "1")
    m = pyge.compile(graph_of("detection"), "cpu")
    assert len(seen) == len(m.submodels) == 3
    assert any("nms" in s for s in seen) and any("box_mm" in s for s in seen)
    files = sorted(os.listdir(tmp_path))
    for part in ("det_static_0", "det_static_1"):
        assert any(f"_{part}_" in f and "Split" in f for f in files), files
    first = {p.name: min(i for i, f in enumerate(files) if f"_{p.name}_" in f) for p in m.submodels[1:]}
    root_files = [i for i, f in enumerate(files) if "Split" in f and "_static_" not in f]
    assert root_files and max(root_files) < min(first.values())      # root first


@pytest.mark.usefixtures("no_custom_passes")
def test_without_the_switch_the_root_gets_no_stream_passes(monkeypatch):
    seen = []
    pyge.register_custom_pass("Count").custom_allocate_stream_pass_fn(
        lambda graph, ctx: seen.append(graph) or GRAPH_SUCCESS)
    monkeypatch.delenv("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM", raising=False)
    m = pyge.compile(graph_of("detection"), "cpu")
    assert len(seen) == 2 == len(m.submodels) - 1
    assert m.submodels[0].num_streams == 1


def test_a_pgm_keeps_the_partition(tmp_path):
    m = pyge.compile(graph_of("nonzero_middle"), "cpu", {"ge.streamMaxParallelNum": "2",
                                                         "pyge.streamAllocation": "nodes"})
    m.save(tmp_path / "m.pgm")
    back = pyge.load_model(tmp_path / "m.pgm")
    assert [(p.name, p.kind, p.streams) for p in back.submodels] == \
        [(p.name, p.kind, p.streams) for p in m.submodels]
    assert [(e.src, e.dst) for e in back.events] == [(e.src, e.dst) for e in m.events]
    feeds = models.FEEDS["mid"](np.random.default_rng(0))
    np.testing.assert_allclose(back.run(feeds)["y"], m.run(feeds)["y"])
    back.verify()


def test_pyge_streams_prints_each_part(tmp_path, capsys):
    from pyge.cli import main
    import onnx
    path = tmp_path / "det.onnx"
    onnx.save(models.detection(), path)
    assert main(["streams", str(path)]) == 0
    out = capsys.readouterr().out
    for name in ("'det'", "'det_static_0'", "'det_static_1'"):
        assert f"part {name}" in out
    assert main(["streams", str(path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in doc["submodels"]] == ["det", "det_static_0", "det_static_1"]


@pytest.mark.parametrize("streams", ["1", "3"])
def test_a_sub_models_outputs_stay_valid_after_its_next_run(streams):
    """What a call node hands the root is the root's: the sub-model's next run does not touch it."""
    m = pyge.compile(graph_of("detection"), "cpu", {"ge.streamMaxParallelNum": streams,
                                                    "pyge.streamAllocation": "nodes"})
    call = m.executor.calls["det_static_0"]
    a = models.FEEDS["det"](np.random.default_rng(0))["x"]
    b = models.FEEDS["det"](np.random.default_rng(1))["x"]
    import torch
    first = call([torch.from_numpy(a)])
    kept = [t.clone() for t in first]
    call([torch.from_numpy(b)])
    for t, k in zip(first, kept):
        assert torch.equal(t, k)
