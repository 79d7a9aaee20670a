"""The work behind `pyge tune MODEL`: measure, try the stream plans, keep the fastest, write a
policy file.

    pyge tune model.onnx [--device cpu|cuda] [-O K=V ...] [-o model.policy.json]
                         [--budget-s 60] [--streams 2,3,4] [--top 3] [--costs costs.json]
                         [--format text|json]

Prints the table of every candidate (simulated and measured time, speedup over single stream
with the spread of the rounds) and writes the policy file; compile with
`-O pyge.policyFile=model.policy.json` (and the same -O values) to get the tuned plan. On a
terminal, standard error shows what is being done. The parser checked the counts and that the
output files can be written, so nothing fails after the minutes of tuning.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import progress
from .args import UsageError, output_file
from .models import load_graph, options_of, tf_flags


def cmd_tune(args: argparse.Namespace) -> int:
    """Carry out `pyge tune`; returns the exit status (0)."""
    from ..tuning.tuner import tune
    options = options_of(args)                   # bad keys fail before any measuring
    out = Path(args.output) if args.output else Path(args.model).with_suffix(".policy.json")
    if not args.output:
        _check_default_output(out)
    pb_inputs, pb_outputs = tf_flags(args)
    with progress.task(f"loading {args.model}"):
        graph = load_graph(args.model, pb_inputs, pb_outputs)
    with progress.task(f"tuning {graph.name}") as shown:
        def on_progress(text: str) -> None:
            shown.desc = f"tuning {graph.name}: {text}"
        result = tune(graph, device=args.device, options=options, stream_counts=args.streams,
                      top=args.top, budget_s=args.budget_s, on_progress=on_progress)
    result.write(out)
    if args.costs:
        result.costs.save(args.costs)
    extra = "".join(f" -O {k}={v}" for k, v in sorted(result.base_options.items()))
    use = f"pyge compile {args.model}{extra} -O pyge.policyFile={out}"
    if args.format == "json":
        print(json.dumps({**result.to_json(), "policy_file": str(out), "use": use}, indent=2))
        return 0
    print(result.table())
    print(f"policy file: {out}  (use: {use})")
    return 0


def _check_default_output(path: Path) -> None:
    """The default policy file (next to MODEL) gets the parser's check of -o."""
    try:
        output_file()(str(path))
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"-o/--output (default {path}): {err}") from err


__all__ = ["cmd_tune"]
