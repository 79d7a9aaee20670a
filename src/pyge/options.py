"""Compile options: GE keys with string values, validated up front.

Unknown keys and malformed values raise OptionError naming the key and the accepted values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import OptionError

_BOOL = ("true", "false")


def _bool(key: str, v: str) -> bool:
    s = str(v).strip().lower()
    if s not in _BOOL:
        raise OptionError(f"option {key}={v!r} is malformed; accepted values: true, false")
    return s == "true"


# ASCII numbers only: int() and float() would also read '1_000', '١٢' (any Unicode digit), 'nan'.
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _digits(key: str, v: str, text: str, accepted: str) -> int:
    """A regex's digit group as an int, refused unless ASCII (`\\d` matches any Unicode digit)."""
    if not (text.isascii() and text.isdigit()):
        raise OptionError(f"option {key}={v!r} is malformed; accepted values: {accepted}")
    return int(text)


def _int_range(key: str, v: str, lo: int, hi: int) -> int:
    if not _INT.fullmatch(str(v).strip()):
        raise OptionError(f"option {key}={v!r} is malformed; accepted values: an integer {lo}..{hi}")
    n = int(str(v).strip())
    if not lo <= n <= hi:
        raise OptionError(f"option {key}={v!r} is out of range; accepted values: an integer {lo}..{hi}")
    return n


def _seconds(key: str, v: str, hi: float = 86400.0) -> float:
    accepted = f"a number of seconds 0..{hi:g} (0 = no limit)"
    if not _FLOAT.fullmatch(str(v).strip()):
        raise OptionError(f"option {key}={v!r} is malformed; accepted values: {accepted}")
    x = float(str(v).strip())
    if not 0.0 <= x <= hi:   # also refuses nan
        raise OptionError(f"option {key}={v!r} is out of range; accepted values: {accepted}")
    return x


def _positive_seconds(key: str, v: str, hi: float = 86400.0) -> float:
    """Seconds, more than 0: a limit that must exist (a collective may not wait forever)."""
    x = _seconds(key, v, hi)
    if x <= 0.0:
        raise OptionError(f"option {key}={v!r} is out of range; accepted values: a number of "
                          f"seconds above 0, up to {hi:g}")
    return x


def _parallel_num(key: str, v: str) -> dict[str, int]:
    """`N` (every engine) or `ENGINE:N,ENGINE:N`."""
    s = str(v).strip()
    accepted = "N (1..64) or ENGINE:N[,ENGINE:N...]"
    if re.fullmatch(r"[0-9]+", s):
        return {"*": _int_range(key, s, 1, 64)}
    out: dict[str, int] = {}
    for part in s.split(","):
        m = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*:\s*(\d+)\s*", part)
        if not m:
            raise OptionError(f"option {key}={v!r} is malformed; accepted values: {accepted}")
        n = _digits(key, v, m.group(2), accepted)
        if not 1 <= n <= 64:   # the whole value in the message, not just this engine's N
            raise OptionError(f"option {key}={v!r} is out of range; accepted values: {accepted}")
        if m.group(1) in out:
            raise OptionError(f"option {key}={v!r} names engine {m.group(1)!r} twice; "
                              f"accepted values: {accepted}")
        out[m.group(1)] = n
    return out


AUTO_MODES = ("LoadBalance", "MainStream", "WeightedLoadBalance")


def _auto_mode(key: str, v: str) -> tuple[str, int] | None:
    s = str(v).strip()
    accepted = "None, LoadBalance:N, MainStream:N or WeightedLoadBalance:N with 1 <= N <= 64"
    if s in ("", "None", "none"):
        return None
    m = re.fullmatch(r"(LoadBalance|MainStream|WeightedLoadBalance)\s*:\s*(\d+)", s)
    if not m:
        raise OptionError(f"option {key}={v!r} is malformed; accepted values: {accepted}")
    n = _digits(key, v, m.group(2), accepted)
    if not 1 <= n <= 64:
        raise OptionError(f"option {key}={v!r} is out of range; accepted values: {accepted}")
    return m.group(1), n


def _choice(key: str, v: str, choices: tuple[str, ...]) -> str:
    s = str(v).strip()
    if s not in choices:
        raise OptionError(f"option {key}={v!r} is not accepted; accepted values: {', '.join(choices)}")
    return s


def _any_str(key: str, v: str) -> str:
    return str(v)


STREAM_POLICIES = ("ge", "critical_path", "min_streams", "list_schedule")
STREAM_ALLOCATIONS = ("clusters", "nodes")

# Keys pyge used to accept under another name: given by a user, they are an error that says so.
RENAMED = {"ge.maxEventNum": ("pyge.maxEventNum", "GE has no compile-time event cap; pyge's "
                              "optional cap is pyge.maxEventNum, 0 (the default) meaning none")}

# key -> (parser, default string, one-line description)
_SPEC: dict[str, tuple[Any, str, str]] = {
    "ge.enableSingleStream": (_bool, "false", "run everything on one stream; custom stream passes are not run"),
    "ge.streamMaxParallelNum": (_parallel_num, "1", "most streams per engine for dependency-based assignment"),
    "ge.autoMultistreamParallelMode": (_auto_mode, "None", "GE's DAG stream pass: None, LoadBalance:N, "
                                       "MainStream:N, WeightedLoadBalance:N"),
    "pyge.maxEventNum": (lambda k, v: _int_range(k, v, 0, 1 << 20), "0",
                         "most physical event ids a plan may use (0 = no cap, as in GE); met by reusing "
                         "ids and adding order, an error only when it cannot be met"),
    "pyge.streamAllocation": (lambda k, v: _choice(k, v, STREAM_ALLOCATIONS), "clusters",
                              "built-in stream rules on GE's engine clusters (clusters) or pyge's "
                              "per-node rules (nodes)"),
    "ge.exec.enableFusion": (_bool, "true", "constant folding and other node-fusing optimisations"),
    "ge.exec.static_model_ops_lower_limit": (lambda k, v: _int_range(k, v, -1, (1 << 63) - 1), "4",
                                             "smallest static sub-model of a dynamic-shape model, in "
                                             "nodes (-1: none, the whole model runs dynamically)"),
    "pyge.streamPolicy": (lambda k, v: _choice(k, v, STREAM_POLICIES), "ge",
                          "built-in stream policy run after GE's chain: " + ", ".join(STREAM_POLICIES)),
    "pyge.policyFile": (_any_str, "", "JSON file mapping node names to streams, applied as a built-in pass"),
    "pyge.maxStreams": (lambda k, v: _int_range(k, v, 1, 64), "4", "stream budget for pyge.streamPolicy"),
    "pyge.costFile": (_any_str, "", "JSON file of measured per-operator costs for pyge.streamPolicy (pyge tune writes it)"),
    "pyge.cudaGraph": (_bool, "true", "capture static graphs into a CUDA graph and replay them (cuda only)"),
    "pyge.intraOpThreads": (lambda k, v: _int_range(k, v, 0, 1024), "0",
                            "torch intra-op threads of every CPU stream (0 = main stream by parallelism, side streams the rest)"),
    "pyge.verify": (_bool, "true", "check the finished plan (dependencies, deadlock, buffer reuse) at compile time"),
    "pyge.memoryReuse": (_bool, "true", "reuse intermediate buffers (stream-aware)"),
    "pyge.customPassTimeout": (_seconds, "120",
                               "seconds one custom pass call (stream or graph) may take before compilation fails (0 = no limit)"),
    "pyge.collectiveTimeout": (_positive_seconds, "60",
                               "seconds a collective (AllReduce, AllGather, AllToAll) may wait for the other ranks"),
}


def accepted_keys() -> list[str]:
    return sorted(_SPEC)


def describe_options() -> list[tuple[str, str, str]]:
    return [(k, _SPEC[k][1], _SPEC[k][2]) for k in sorted(_SPEC)]


@dataclass(frozen=True)
class Options:
    raw: Mapping[str, str] = field(default_factory=dict)
    parsed: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.parsed[key]

    def get_string(self, key: str) -> str | None:
        """The string value as given (or the default); None for an unknown key."""
        if key in self.raw:
            return str(self.raw[key])
        spec = _SPEC.get(key)
        return spec[1] if spec else None

    @property
    def single_stream(self) -> bool:
        return bool(self.parsed["ge.enableSingleStream"])

    def merged(self, more: Mapping[str, str] | None) -> "Options":
        raw = dict(self.raw)
        raw.update(more or {})
        return parse_options(raw)

    def as_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.raw.items()}


def parse_options(options: Mapping[str, Any] | Options | None) -> Options:
    if isinstance(options, Options):
        return options
    raw = {}
    if options is not None and not isinstance(options, Mapping):
        raise OptionError(f"options must be a dict of string keys and values, got {type(options).__name__}")
    for k, v in (options or {}).items():
        if k in RENAMED:
            new, why = RENAMED[k]
            raise OptionError(f"option {k!r} was renamed {new!r} ({why})")
        if k not in _SPEC:
            raise OptionError(f"unknown option {k!r}; accepted keys: {', '.join(accepted_keys())}")
        if isinstance(v, bool):
            v = "true" if v else "false"
        raw[k] = str(v)
    parsed = {}
    for k, (parser, default, _) in _SPEC.items():
        parsed[k] = parser(k, raw.get(k, default))
    if parsed["ge.enableSingleStream"] and parsed["ge.autoMultistreamParallelMode"] is not None:
        raise OptionError(f"option ge.autoMultistreamParallelMode={raw['ge.autoMultistreamParallelMode']!r} "
                          "conflicts with ge.enableSingleStream=true (the automatic mode spreads work "
                          "over streams, the switch allows one); set one of them only")
    return Options(raw=raw, parsed=parsed)
