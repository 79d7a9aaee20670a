"""A policy file: a saved stream assignment applied by a built-in pass (`pyge.policyFile`).

Like ONNX Runtime's partition config, it maps node names to streams, so a tuned result can
be saved, reviewed, diffed and reused:

    {"version": 1, "model": "inception_v1",
     "streams": {"conv1": 0, "inception_3a/1x1": 1, ...},
     "order": ["conv1", "pool1", ...]}                       (optional)

* `streams` names root-graph nodes (the nodes after constant folding, as `pyge streams`
  lists them). A name that is not a root-graph node is an OptionError naming the file and
  the first such name, rather than a silent no-op.
* Nodes the file does not name **keep the stream they already have** (GE's chain, or the
  `pyge.streamPolicy` that ran first). So a short file fine-tunes (the reference's "move
  Abs_1 to its own stream" is one line), and a complete one, as `pyge tune` writes,
  replaces the assignment. Ids are taken as written; used ids are renumbered to 0..N-1
  afterwards, so a new id (say 99) simply means "a stream of its own".
* The file wins over stream labels for the nodes it names: it is an explicit per-node
  request, as a custom pass is.
* `order`, if given, is the launch order the file was tuned with: named nodes are ordered
  by it (the rest stay next to their predecessors), then the graph is re-sorted
  topologically, so a stream launches its nodes in the saved order.
* Other keys (`model`, `device`, `tuned`, ...) are informative; `model` differing from the
  graph's name is logged, not an error (a renamed export is still the same network).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import OptionError
from ...ir.graph import Graph

log = logging.getLogger(__name__)

VERSION = 1
MAX_STREAM_ID = 1023
_KEY = "option pyge.policyFile"


@dataclass
class PolicyFile:
    path: str
    streams: dict[str, int]
    order: list[str] | None = None
    model: str | None = None
    extra: dict = field(default_factory=dict)


def _bad(path: str, what: str) -> OptionError:
    return OptionError(f"{_KEY}: {path!r} {what}")


def read_policy_file(path: str | Path) -> PolicyFile:
    p = str(path)
    try:
        data = json.loads(Path(p).read_text())
    except OSError as err:
        raise _bad(p, f"cannot be read: {err.strerror or err}") from err
    except ValueError as err:
        raise _bad(p, f"is not valid JSON: {err}") from err
    if not isinstance(data, dict) or isinstance(data.get("version"), bool) or data.get("version") != VERSION:
        raise _bad(p, f'is not a version {VERSION} policy file ({{"version": 1, "streams": {{node: id}}}})')
    streams = data.get("streams")
    if not isinstance(streams, dict):
        raise _bad(p, 'has no "streams" object mapping node names to stream ids')
    for name, sid in streams.items():
        if isinstance(sid, bool) or not isinstance(sid, int) or not 0 <= sid <= MAX_STREAM_ID:
            raise _bad(p, f"gives node {name!r} stream {sid!r}; accepted values: an integer 0..{MAX_STREAM_ID}")
    order = data.get("order")
    if order is not None and (not isinstance(order, list) or not all(isinstance(x, str) for x in order)):
        raise _bad(p, 'has an "order" that is not a list of node names')
    model = data.get("model")
    extra = {k: v for k, v in data.items() if k not in ("version", "streams", "order", "model")}
    return PolicyFile(p, {str(k): v for k, v in streams.items()}, order, model if isinstance(model, str) else None,
                      extra)


def apply_policy_file(graph: Graph, path: str | Path) -> int:
    """Apply the file to `graph`'s direct nodes; returns how many nodes it named.
    Checks everything before changing anything."""
    pf = read_policy_file(path)
    by_name = {n.name: n for n in graph.nodes}
    for name in [*pf.streams, *(pf.order or ())]:
        if name not in by_name:
            raise _bad(pf.path, f"names node {name!r}, which is not a node of graph {graph.name!r} "
                                "(names are the root graph's nodes after constant folding, as "
                                "`pyge streams` lists them)")
    if pf.model is not None and pf.model != graph.name:
        log.info("policy file %s was written for model %r; applying it to %r", pf.path, pf.model, graph.name)
    for name, sid in pf.streams.items():
        by_name[name].stream_id = sid
    if pf.order:
        _reorder(graph, pf.order)
    log.debug("policy file %s set the stream of %d node(s)", pf.path, len(pf.streams))
    return len(pf.streams)


def _reorder(graph: Graph, order: list[str]) -> None:
    pos = {name: i for i, name in enumerate(order)}
    key, last = {}, -1
    for i, n in enumerate(graph.topological_sort()):
        if n.name in pos:
            last = pos[n.name]
            key[id(n)] = (last, 0, i)
        else:                                  # unnamed: right after the named node before it
            key[id(n)] = (last, 1, i)
    graph.set_node_order(sorted(graph.nodes, key=lambda n: key[id(n)]))
    graph.sort()


def policy_dict(model: str, streams: dict[str, int], order: list[str] | None = None, **extra) -> dict:
    """The JSON object of a policy file (what `pyge tune` writes)."""
    out: dict = {"version": VERSION, "model": model, "streams": dict(streams)}
    if order is not None:
        out["order"] = list(order)
    out.update(extra)
    return out


def write_policy_file(path: str | Path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
