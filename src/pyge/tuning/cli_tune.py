"""`pyge tune MODEL`: measure, try the stream policies, keep the fastest, write a policy file.

    pyge tune model.onnx [--device cpu|cuda] [--option K=V ...] [-o model.policy.json]
                         [--budget-s 60] [--streams 2,3,4] [--top 3] [--costs costs.json]

Prints the table of every candidate (simulated and measured time, ratio to single stream)
and writes the policy file; compile with `--option pyge.policyFile=model.policy.json` (and
the same --option values) to get the tuned plan. Errors are PygeErrors, left to the `pyge`
command's one-line reporting.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
from pathlib import Path

from ..errors import OptionError, PygeError

_DESCRIPTION = """\
Measure every operator on the device, build candidate stream plans (single stream, GE's
chain and automatic modes, and the policies critical_path, min_streams and list_schedule for
each stream count), rank them with the simulator, time the best few side by side with
single stream, and write the fastest as a policy file. A plan is kept only if it is
measurably faster than single stream."""


def add_tune_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `tune` command to the `pyge` command's subparsers; returns its parser."""
    from ..cli_models import key_value
    p = subparsers.add_parser("tune", help="find the fastest stream plan and write it as a policy file",
                              description=_DESCRIPTION)
    p.add_argument("model", metavar="MODEL", help="an .onnx file")
    p.add_argument("--device", default="cpu", metavar="DEV", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--option", "-O", action="append", type=key_value, metavar="KEY=VALUE",
                   help="a compile option kept for every candidate, repeatable")
    p.add_argument("-o", "--output", metavar="POLICY.json",
                   help="the policy file to write (default: MODEL with suffix .policy.json)")
    p.add_argument("--budget-s", type=float, default=60.0, metavar="N",
                   help="time budget in seconds (default: 60; at least 5 timing rounds are run)")
    p.add_argument("--streams", default=None, metavar="K,K,...",
                   help="stream counts to try (default: 2,3,4 and the core count on cpu; 2,3,4,6,8 on cuda)")
    p.add_argument("--top", type=int, default=3, metavar="N",
                   help="how many of the best simulated candidates to time (default: 3)")
    p.add_argument("--costs", metavar="COSTS.json",
                   help="also write the measured per-operator costs here (usable as pyge.costFile)")
    p.add_argument("--json", metavar="TABLE.json", help="also write the table of candidates as JSON")
    return p


def _stream_counts(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ks = []
    if not ks or any(not 1 <= k <= 64 for k in ks):
        raise OptionError(f"--streams {text!r} is malformed; accepted values: integers 1..64 separated by commas")
    return ks


def _check_writable(flag: str, path: Path) -> None:
    """Fail before minutes of tuning, not after: `path`'s folder must take a new file."""
    if path.is_dir():
        raise PygeError(f"{flag} {str(path)!r} is a folder, not a file")
    try:                                 # os.access is not enough (root, read-only mounts)
        fd, probe = tempfile.mkstemp(prefix=".pyge_tune_probe_", dir=path.parent)
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        raise PygeError(f"{flag} {str(path)!r} cannot be written: {err.strerror or err}") from err


def run_tune(args: argparse.Namespace) -> int:
    """Carry out `pyge tune`; returns the exit status (0)."""
    from ..cli_models import load_graph, options_of
    from ..options import parse_options
    from .tuner import tune
    options = options_of(args)
    parse_options(options)                       # bad keys fail before any measuring
    ks = _stream_counts(args.streams)
    if args.top < 1:
        raise OptionError(f"--top {args.top} is out of range; accepted values: an integer >= 1")
    if not (math.isfinite(args.budget_s) and args.budget_s >= 0):     # nan would never end the rounds early
        raise OptionError(f"--budget-s {args.budget_s} is out of range; accepted values: seconds >= 0")
    out = Path(args.output) if args.output else Path(args.model).with_suffix(".policy.json")
    for flag, path in (("-o/--output", out), ("--costs", args.costs), ("--json", args.json)):
        if path:
            _check_writable(flag, Path(path))
    graph = load_graph(args.model)
    result = tune(graph, device=args.device, options=options, stream_counts=ks, top=args.top,
                  budget_s=args.budget_s)
    result.write(out)
    if args.costs:
        result.costs.save(args.costs)
    if args.json:
        Path(args.json).write_text(json.dumps([c.row() for c in result.candidates], indent=1) + "\n")
    print(result.table())
    extra = "".join(f" --option {k}={v}" for k, v in sorted(result.base_options.items()))
    print(f"policy file: {out}  (use: pyge compile {args.model}{extra} --option pyge.policyFile={out})")
    return 0
