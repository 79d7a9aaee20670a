"""Reading DUMP_GE_GRAPH, DUMP_GRAPH_LEVEL and DUMP_GRAPH_PATH (GE's spelling and meaning).

    DUMP_GE_GRAPH    1 full, 2 without weights, 3 structure only; unset, empty or 0: no dumps
    DUMP_GRAPH_LEVEL 1 every stage, 2 (default) the stages that matter, 3 the built graph only,
                     or text: the stages whose name contains it ("A|B" for either)
    DUMP_GRAPH_PATH  the folder (created if missing; default: the current folder)

Everything is checked when a compile starts, before any compile work, so that a typo or an
unwritable folder is one clear error rather than a failure half-way through a compile.

The names of the dump stages around custom graph passes are here too (`graph_pass_stage`,
`GE_STAGE_DUMPS`): they are keyed by GE's stage strings ("AfterInferShape", ...), so that
this layer needs nothing from the passes.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Mapping

from ..errors import DumpError, OptionError

FULL, NO_WEIGHTS, STRUCTURE = 1, 2, 3
MODE_NAMES = {FULL: "full", NO_WEIGHTS: "without weights", STRUCTURE: "structure only"}

LEVEL_ALL, LEVEL_DEFAULT, LEVEL_BUILT = 1, 2, 3

# GE's own dump after all the custom graph passes of a stage (graph_manager.cc, graph_prepare.cc,
# graph_optimize.cc spell them differently; these are GE's names, as they are).
GE_STAGE_DUMPS = {
    "BeforeInferShape": "RunCustomPassBeforeInfershape",
    "AfterInferShape": "RunCustomPass_AfterInferShape",
    "AfterBuiltinFusionPass": "RunCustomPassAfterBuiltinFusionPass",
    "AfterOriginGraphOptimize": "RunCustomPassAfterOriginGraphOptimize",
}


def graph_pass_stage(stage: str, pass_name: str, before: bool) -> str:
    """The dump stage around one graph pass call at GE stage `stage` ("AfterInferShape"):
    `RunCustomPassBegin_<Stage><Pass>` before it, `RunCustomPass_<Stage><Pass>` after it, as
    the stream passes' `RunCustomPass_AfterAssignLogicStream<Pass>` is named after theirs."""
    return f"RunCustomPass{'Begin' if before else ''}_{stage}{pass_name}"


@dataclass(frozen=True)
class DumpConfig:
    mode: int                      # FULL, NO_WEIGHTS or STRUCTURE
    level: int | None              # 1, 2 or 3; None when `patterns` filters by name
    patterns: tuple[str, ...]      # substrings of stage names (DUMP_GRAPH_LEVEL as text)
    folder: str

    def wants(self, stage: str, stage_level: int) -> bool:
        """Whether a stage of importance `stage_level` (1 detail .. 3 built graph) is written."""
        if self.level is None:
            return any(p in stage for p in self.patterns)
        return stage_level >= self.level


def parse_mode(raw: str | None) -> int | None:
    """DUMP_GE_GRAPH -> FULL / NO_WEIGHTS / STRUCTURE, or None when dumping is off."""
    text = (raw or "").strip()
    if text in ("", "0"):
        return None
    if text in ("1", "2", "3"):
        return int(text)
    raise OptionError(f"environment variable DUMP_GE_GRAPH={raw!r} is not valid; accepted values: "
                      "1 (full), 2 (without weights), 3 (structure only), or unset/0 (no dumps)")


def parse_level(raw: str | None) -> tuple[int | None, tuple[str, ...]]:
    """DUMP_GRAPH_LEVEL -> (level, ()) or (None, substrings)."""
    text = (raw or "").strip()
    if text == "":
        return LEVEL_DEFAULT, ()
    if text.lstrip("+-").isdigit():
        if text in ("1", "2", "3"):
            return int(text), ()
        raise OptionError(f"environment variable DUMP_GRAPH_LEVEL={raw!r} is not valid; accepted values: "
                          "1 (all stages), 2 (default: custom passes and the built graph), "
                          "3 (the built graph only), or a substring of stage names")
    patterns = tuple(p.strip() for p in text.split("|") if p.strip())
    if not patterns:
        raise OptionError(f"environment variable DUMP_GRAPH_LEVEL={raw!r} names no stage; accepted values: "
                          "1, 2, 3, or a substring of stage names ('A|B' for either)")
    return None, patterns


def check_folder(path: str) -> str:
    """Create the dump folder if needed and prove it writable; DumpError naming it otherwise."""
    folder = os.path.abspath(os.path.expanduser(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise DumpError(f"dump folder {folder!r} (DUMP_GRAPH_PATH) cannot be created: "
                        f"{err.strerror or err}") from err
    if not os.path.isdir(folder):
        raise DumpError(f"dump folder {folder!r} (DUMP_GRAPH_PATH) is not a folder")
    # os.access is not enough (root, ACLs, read-only mounts): write a probe file.
    try:
        fd, probe = tempfile.mkstemp(prefix=".pyge_dump_probe_", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        raise DumpError(f"dump folder {folder!r} (DUMP_GRAPH_PATH) is not writable: "
                        f"{err.strerror or err}") from err
    return folder


def config_from_env(env: Mapping[str, str] | None = None) -> DumpConfig | None:
    """The dump settings, or None when DUMP_GE_GRAPH is unset (then nothing else is read)."""
    env = os.environ if env is None else env
    mode = parse_mode(env.get("DUMP_GE_GRAPH"))
    if mode is None:
        return None
    level, patterns = parse_level(env.get("DUMP_GRAPH_LEVEL"))
    raw_path = env.get("DUMP_GRAPH_PATH") or os.getcwd()
    return DumpConfig(mode=mode, level=level, patterns=patterns, folder=check_folder(raw_path))
