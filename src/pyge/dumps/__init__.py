"""GE-style graph dumps: ONNX text protobufs that open in Netron, written while compiling.

Controlled by DUMP_GE_GRAPH, DUMP_GRAPH_LEVEL and DUMP_GRAPH_PATH (see dumps/config.py).
Files are `ge_onnx_<8-digit seq>_graph_<graph id>_<stage>.pbtxt`, the sequence number
counting every dump this process writes, in the order written.

Stages and their levels (a stage is written when its level >= DUMP_GRAPH_LEVEL):

    level 1  InferShapes, FoldConstants, FuseConvBN, AssignLogicStream, StreamPolicy, RenumberStreams
             (after the compiler pass of that name; the DumpInstrument asks for them)
    level 2  RunCustomPassBegin_<Stage><Pass>, RunCustomPass_<Stage><Pass> around each custom
             graph pass call (<Stage>: BeforeInferShape, AfterInferShape, AfterBuiltinFusionPass,
             AfterOriginGraphOptimize), then GE's own stage dump (RunCustomPassBeforeInfershape,
             RunCustomPass_AfterInferShape, RunCustomPassAfterBuiltinFusionPass,
             RunCustomPassAfterOriginGraphOptimize: the checked graph the compiler goes on with)
             after a stage where a graph pass ran;
             RunCustomPass_BeforeAssignLogicStream<Pass>, RunCustomPass_AfterAssignLogicStream<Pass>
             (around each stream pass call, once per compiled model; GE's DAG pass of the
             automatic mode is MiniDAGStreamPass). An "after" dump is written also when the
             pass fails, so that the user sees what the pass did before it failed.
    level 3  PreRunAfterBuild: the built graph with its Send/Recv nodes and event ids, last

DUMP_GRAPH_LEVEL given as text writes the stages whose name contains it (`A|B`: either).

A dynamic-shape model writes the model-pass stages (level 1's stream stages, level 2, level
3) once per part, root first, as `ge_onnx_<seq>_graph_<id>_<part>_<stage>.pbtxt`; the graph
passes' stages (InferShapes, FoldConstants, FuseConvBN) run before the partition and are
written once, for the whole graph, without a part name.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
import threading
from typing import Mapping

from ..errors import DumpError
from ..ir.graph import Graph
from .built_graph import into_dump
from .config import MODE_NAMES, DumpConfig, config_from_env
from .convert import finish, graph_model, parse_text, to_text

log = logging.getLogger(__name__)

BUILT_STAGE = "PreRunAfterBuild"
BUILT_LEVEL = 3
CUSTOM_LEVEL = 2
DETAIL_LEVEL = 1

_seq = itertools.count()
_seq_lock = threading.Lock()


def _next_seq() -> int:
    with _seq_lock:
        return next(_seq)


def _safe(stage: str) -> str:
    """A stage name usable in a file name (pass names come from users)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", stage)[:160] or "stage"


def dump_file_name(seq: int, graph_id: int, stage: str, part: str | None = None) -> str:
    """The file of a dump; `part` (a dynamic-shape model's sub-model) comes before the stage."""
    where = f"{_safe(part)}_" if part else ""
    return f"ge_onnx_{seq:08d}_graph_{graph_id}_{where}{_safe(stage)}.pbtxt"


class Dumper:
    """Writes one compile's dumps. Disabled (every method a no-op) when DUMP_GE_GRAPH is unset.

    A dynamic-shape model's parts are compiled one after the other, root first; each gets
    `for_part(name)`, a Dumper that writes the part's name into its file names and its
    `pyge.submodel` metadata and adds its files to the same list."""

    def __init__(self, config: DumpConfig | None, graph_id: int, part: str | None = None,
                 files: list[str] | None = None):
        self.config = config
        self.graph_id = graph_id
        self.part = part
        self.files: list[str] = files if files is not None else []   # paths written, in order

    def for_part(self, name: str) -> "Dumper":
        return Dumper(self.config, self.graph_id, part=name, files=self.files)

    @property
    def enabled(self) -> bool:
        return self.config is not None

    @classmethod
    def from_env(cls, graph_id: int, env: Mapping[str, str] | None = None) -> "Dumper":
        """Read the environment now; OptionError for a malformed value, DumpError for a folder
        that cannot be written (both before any compile work)."""
        return cls(config_from_env(env), graph_id)

    def wants(self, stage: str, level: int) -> bool:
        return self.config is not None and self.config.wants(stage, level)

    def stage(self, stage: str, graph: Graph, level: int = CUSTOM_LEVEL) -> str | None:
        """Dump `graph` as it is after `stage`; returns the file written, if any."""
        if not self.wants(stage, level):
            return None
        mp = graph_model(graph, self.config.mode)
        meta = {"pyge.graph": graph.name}
        for key, value in graph.attrs.items():     # GE's graph attributes, as a pass left them
            meta[f"pyge.graph_attr.{key}"] = str(value)
        if graph.parent is not None:   # a custom pass run on a subgraph: say whose
            meta["pyge.subgraph_of"] = graph.parent.name
        return self._write(stage, mp, meta)

    def built(self, graph: Graph, plan) -> str | None:
        """Dump the built graph: operators in stream order plus the plan's Send/Recv nodes."""
        if not self.wants(BUILT_STAGE, BUILT_LEVEL):
            return None
        mp = graph_model(graph, self.config.mode)
        into_dump(mp, graph, plan)
        mp.graph.doc_string = plan.format()
        meta = {"pyge.num_streams": str(plan.num_streams), "pyge.num_event_pairs": str(len(plan.events)),
                "pyge.num_physical_events": str(plan.num_physical_events)}
        return self._write(BUILT_STAGE, mp, meta)

    def _write(self, stage: str, mp, meta: dict[str, str]) -> str:
        meta = dict(meta, **{"pyge.stage": stage, "pyge.graph_id": str(self.graph_id),
                             "pyge.dump_mode": MODE_NAMES[self.config.mode]})
        if self.part is not None:
            meta["pyge.submodel"] = self.part
        text = to_text(finish(mp, self.config.mode, meta))
        path = os.path.join(self.config.folder, dump_file_name(_next_seq(), self.graph_id, stage, self.part))
        try:
            with open(path, "w", encoding="ascii", errors="backslashreplace") as f:
                f.write(text)
        except OSError as err:
            raise DumpError(f"cannot write graph dump {path!r}: {err.strerror or err}") from err
        self.files.append(path)
        log.info("dumped graph %s stage %s to %s", self.graph_id, stage, path)
        return path

    def __repr__(self) -> str:
        if self.config is None:
            return "<Dumper disabled>"
        c = self.config
        what = f"level {c.level}" if c.level is not None else f"stages matching {'|'.join(c.patterns)}"
        return f"<Dumper graph {self.graph_id}: {MODE_NAMES[c.mode]}, {what}, in {c.folder}>"


def load_dump(path: str):
    """Read a dump back as an onnx.ModelProto."""
    with open(path, encoding="ascii") as f:
        return parse_text(f.read())


__all__ = ["Dumper", "DumpConfig", "BUILT_STAGE", "dump_file_name", "load_dump", "config_from_env"]
