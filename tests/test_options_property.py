"""Random option strings (issue 20): parse_options raises nothing but OptionError, and never
accepts a value the grammar of its key (INTERFACE.md, "Options") calls malformed.

The oracle writes each grammar down independently: numbers are ASCII digits (Python's int()
and float() would also take '1_000', '١٢' or 'nan'), whitespace around a value and around the
':' of ENGINE:N or Mode:N is allowed, booleans ignore case. Keys without a grammar here (added
since) are still checked for the exception type.
"""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

import pyge
from pyge.options import STREAM_POLICIES, accepted_keys, parse_options

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_ENGINE_N = re.compile(r"\s*([A-Za-z_][\w.]*)\s*:\s*([0-9]+)\s*")
_MODE_N = re.compile(r"(LoadBalance|MainStream|WeightedLoadBalance)\s*:\s*([0-9]+)")


def _bool(s: str) -> bool:
    return s.strip().lower() in ("true", "false")


def _int(lo: int, hi: int):
    return lambda s: bool(_INT.fullmatch(s.strip())) and lo <= int(s.strip()) <= hi


def _seconds(hi: float):
    return lambda s: bool(_FLOAT.fullmatch(s.strip())) and 0.0 <= float(s.strip()) <= hi


def _parallel(s: str) -> bool:
    s = s.strip()
    if re.fullmatch(r"[0-9]+", s):
        return 1 <= int(s) <= 64
    engines = []
    for part in s.split(","):
        m = _ENGINE_N.fullmatch(part)
        if not m or not 1 <= int(m.group(2)) <= 64:
            return False
        engines.append(m.group(1))
    return len(set(engines)) == len(engines)


def _auto(s: str) -> bool:
    s = s.strip()
    m = _MODE_N.fullmatch(s)
    return s in ("", "None", "none") or (m is not None and 1 <= int(m.group(2)) <= 64)


# key -> is the value well formed; keys the running pyge does not accept are left out below
GRAMMAR = {
    "ge.enableSingleStream": _bool, "ge.exec.enableFusion": _bool, "pyge.cudaGraph": _bool,
    "pyge.verify": _bool, "pyge.memoryReuse": _bool,
    "ge.streamMaxParallelNum": _parallel,
    "ge.autoMultistreamParallelMode": _auto,
    "ge.maxEventNum": _int(1, 1 << 20), "pyge.maxEventNum": _int(0, 1 << 20),
    "pyge.maxStreams": _int(1, 64), "pyge.intraOpThreads": _int(0, 1024),
    "pyge.customPassTimeout": _seconds(86400.0),
    "pyge.streamPolicy": lambda s: s.strip() in STREAM_POLICIES,
    "pyge.policyFile": lambda s: True, "pyge.costFile": lambda s: True,
}
KNOWN = [k for k in accepted_keys() if k in GRAMMAR]

# Values near the grammars, so that both sides of each rule are drawn, and anything at all.
_WS = st.sampled_from(["", "", " ", "\t", "\u2003"])
_DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=3) | st.sampled_from(["1_0", "٣", "4\u0664", "00"])
_NUMBER = st.builds(lambda a, sign, d, frac, b: f"{a}{sign}{d}{frac}{b}", _WS, st.sampled_from(["", "", "+", "-"]),
                    _DIGITS, st.sampled_from(["", "", ".5", "e3", "e-400", "."]), _WS)
_NAMED_N = st.builds(lambda name, a, b, n: f"{name}{a}:{b}{n}",
                     st.sampled_from(["LoadBalance", "MainStream", "WeightedLoadBalance", "compute", "AIcoreEngine",
                                      "x.y", "_e", "é", "9a", ""]), _WS, _WS, _DIGITS)
_PIECES = ["true", "false", "TRUE", "None", "none", "nan", "inf", ",", ":", "ge", "critical_path", "\x00", "é"]
VALUES = st.one_of(_NUMBER, _NAMED_N, st.lists(_NAMED_N, min_size=2, max_size=3).map(",".join),
                   st.lists(st.sampled_from(_PIECES) | _WS, max_size=3).map("".join), st.text(max_size=12))


def _parse(options):
    try:
        return parse_options(options)
    except pyge.OptionError:
        return None


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.sampled_from(accepted_keys()), st.text(max_size=20)),
                       st.one_of(VALUES, st.integers(-5, 70), st.booleans()), max_size=4))
def test_any_options_give_an_option_error_or_only_well_formed_values(options):
    parsed = _parse(options)                 # anything but OptionError propagates and fails
    if parsed is None:
        return
    for key, value in options.items():
        assert key in accepted_keys()
        grammar = GRAMMAR.get(key)
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        assert grammar is None or grammar(text), f"accepted malformed {key}={value!r}"


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(KNOWN), VALUES)
def test_one_option_is_accepted_exactly_when_well_formed(key, value):
    if key == "ge.autoMultistreamParallelMode" and "WeightedLoadBalance" in value:
        value = value.replace("WeightedLoadBalance", "LoadBalance")   # not every pyge has it yet
    assert (_parse({key: value}) is not None) == GRAMMAR[key](value), f"{key}={value!r}"


def test_the_oracle_covers_the_contract_keys():
    assert {"ge.enableSingleStream", "ge.streamMaxParallelNum", "ge.autoMultistreamParallelMode"} <= set(KNOWN)
