"""The `pyge` command's parsers: one builder per command, and the flags they share.

Conventions kept the same on every command:
  --format text|json   what goes to standard output (--json: same as --format json)
  --trace TRACE.json   a Chrome/Perfetto trace file of profiled runs (`run` also takes
                       --profile TRACE.json, the contract's spelling of the same flag)
  --timeline PLOT.png  a per-stream timeline picture of profiled runs
  -O/--option KEY=VALUE, --device DEV, --debug, -v
Help is short per command; the compile options and environment variables are listed once,
by `pyge --help`. Only the standard library is imported here (see args.py).
"""
from __future__ import annotations

import argparse

from . import args as a

FMT = argparse.RawDescriptionHelpFormatter
MORE = "compile options (-O KEY=VALUE) and environment variables: see 'pyge --help' or docs/options.md"


def _format_name(text: str) -> str:
    return "text" if text == "table" else text     # `streams --format table` was the old spelling


def add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", type=_format_name, choices=("text", "json"), default="text",
                   help="what to print on standard output: text (default) or json")
    p.add_argument("--json", dest="format", action="store_const", const="json",
                   help="same as --format json")


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks and debug logging")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log what the compiler does (INFO level), the plugin files loaded included")


def _model(p: argparse.ArgumentParser, optional: bool, what: str = "an .onnx, .pb or .pgm file") -> None:
    if optional:
        p.add_argument("model", nargs="?", metavar="MODEL",
                       help=f"{what} (default: the built-in inception-like block)")
    else:
        p.add_argument("model", metavar="MODEL", help=what)


def _compile_flags(p: argparse.ArgumentParser, default_device: str | None = None) -> None:
    shown = default_device or "cpu; for a .pgm, the device it was compiled for"
    p.add_argument("--device", type=a.device, default=default_device, metavar="DEV",
                   help=f"cpu (a worker thread per stream), cuda or cuda:N (default: {shown})")
    p.add_argument("--option", "-O", action="append", type=a.key_value, metavar="KEY=VALUE",
                   help="a compile option, repeatable")


def _graph_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graph-id", type=a.count(0), default=None, metavar="N",
                   help="graph id in dump file names (default: a counter from 1)")


def _tf_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("TensorFlow frozen graphs (MODEL.pb; needs the extra: pip install -e '.[tf]')")
    g.add_argument("--pb-inputs", nargs="+", metavar="NODE:0",
                   help="input tensors (default: the Placeholders)")
    g.add_argument("--pb-outputs", nargs="+", metavar="NODE:0",
                   help="output tensors (default: the nodes nothing reads)")


def _inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", action="append", type=a.input_file, metavar="NAME=FILE.npy",
                   help="an input from a .npy file, repeatable (FILE.npy alone for a one-input "
                        "model); the others are random")
    p.add_argument("--shape", action="append", type=a.shape, metavar="NAME=D0,D1,...",
                   help="shape of a random input whose sizes are unknown (default: 1 each)")
    p.add_argument("--seed", type=a.count(0), default=0, metavar="N",
                   help="seed of the random inputs (default: 0)")


def _profile_outputs(p: argparse.ArgumentParser, contract_alias: bool) -> None:
    names = ("--trace", "--profile") if contract_alias else ("--trace",)
    p.add_argument(*names, dest="trace", type=a.output_file(), metavar="TRACE.json",
                   help="write a Chrome/Perfetto trace of the profiled runs"
                        + (" (--profile: the same)" if contract_alias else ""))
    p.add_argument("--timeline", type=a.output_file(a.picture_formats), metavar="PLOT.png",
                   help="write a per-stream timeline picture of one profiled run")


def _command(sub, name: str, help: str, description: str, epilog: str | None = MORE) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=description, epilog=epilog)


# -- one builder per command ------------------------------------------------------------------

def compile_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "compile", "compile a model into an offline model (.pgm)",
                 "Compile MODEL and write its plan (streams, events, memory plan, weights) to "
                 "OUT.pgm, which `pyge run` loads without compiling.")
    _model(p, optional=False, what="an .onnx or .pb file")
    p.add_argument("-o", "--output", required=True, type=a.output_file(), metavar="OUT.pgm",
                   help="the offline model to write")
    _compile_flags(p)
    _graph_id(p)
    add_format(p)
    _tf_flags(p)
    return p


def run_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "run", "run a model (or the built-in one): outputs and timing",
                 "Compile (or load) MODEL, run it and print its outputs and timing; with --trace "
                 "or --timeline, also profile the runs and print the per-stream summary.")
    _model(p, optional=True)
    _compile_flags(p)
    _graph_id(p)
    _inputs(p)
    p.add_argument("--runs", "-n", type=a.count(1), default=1, metavar="N", help="timed runs (default: 1)")
    p.add_argument("--warmup", type=a.count(0), default=1, metavar="N", help="untimed runs first (default: 1)")
    _profile_outputs(p, contract_alias=True)
    p.add_argument("--save-outputs", type=a.output_dir, metavar="DIR",
                   help="write each output to DIR/<name>.npy, bytes other than letters, digits, "
                        "'-', '_', '.' written as %%XX (a/b -> a%%2Fb.npy), and DIR/manifest.json "
                        "mapping each output name to its file")
    add_format(p)
    _tf_flags(p)
    return p


def streams_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "streams", "the stream of every node, the events, a per-stream summary",
                 "Compile (or load) MODEL and show what the stream passes decided.")
    _model(p, optional=True)
    _compile_flags(p)
    _graph_id(p)
    p.add_argument("--plan", action="store_true", help="also print each stream's steps (launch, record, wait)")
    add_format(p)
    _tf_flags(p)
    return p


def profile_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "profile", "profile runs: per-stream busy time, overlap, time per op type",
                 "Compile (or load) MODEL, profile N runs and print the per-stream summary and "
                 "where the time goes by operator type.")
    _model(p, optional=True)
    _compile_flags(p)
    _graph_id(p)
    _inputs(p)
    p.add_argument("--runs", "-n", type=a.count(1), default=10, metavar="N", help="profiled runs (default: 10)")
    p.add_argument("--warmup", type=a.count(0), default=1, metavar="N", help="untimed runs first (default: 1)")
    _profile_outputs(p, contract_alias=False)
    add_format(p)
    _tf_flags(p)
    return p


def demo_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "demo", "the reference custom stream pass, end to end (no files needed)",
                 "Build the reference graph (two independent operators, one named Abs_1, that GE's "
                 "built-in allocation puts on one stream), compile it without and with the custom "
                 "stream pass SplitAbs (which gives Abs_1 a stream of its own), write the graph "
                 "dumps, compare the two versions run for run, and write their profiles.",
                 epilog=None)
    p.add_argument("--out", type=a.output_dir, metavar="DIR",
                   help="folder for dumps, traces and timelines (default: a new temporary folder)")
    p.add_argument("--runs", "-n", type=a.count(1), default=20, metavar="N",
                   help="runs of each version, for the comparison and the profiles (default: 20)")
    return p


def tune_parser(sub) -> argparse.ArgumentParser:
    p = _command(sub, "tune", "find the fastest stream plan and write it as a policy file",
                 "Measure every operator, build candidate stream plans (single stream, GE's rules "
                 "and automatic modes, the pyge policies for each stream count), rank them with "
                 "the simulator, time the best few in interleaved rounds against single stream, "
                 "and write the fastest as a policy file. A plan is kept only when its speedup "
                 "over single stream is beyond the spread of the rounds.")
    _model(p, optional=False, what="an .onnx or .pb file")
    _compile_flags(p, default_device="cpu")
    p.add_argument("-o", "--output", type=a.output_file(), metavar="POLICY.json",
                   help="the policy file to write (default: MODEL with suffix .policy.json)")
    p.add_argument("--budget-s", type=a.seconds, default=60.0, metavar="S",
                   help="time budget in seconds (default: 60; at least 5 timing rounds are run)")
    p.add_argument("--streams", type=a.stream_counts, default=None, metavar="K,K,...",
                   help="stream counts to try (default: 2,3,4 and the core count on cpu; 2,3,4,6,8 on cuda)")
    p.add_argument("--top", type=a.count(1), default=3, metavar="N",
                   help="how many of the best simulated candidates to time (default: 3)")
    p.add_argument("--costs", type=a.output_file(), metavar="COSTS.json",
                   help="also write the measured per-operator costs (usable as pyge.costFile)")
    add_format(p)
    _tf_flags(p)
    return p


__all__ = ["compile_parser", "run_parser", "streams_parser", "profile_parser", "demo_parser",
           "tune_parser", "add_common", "add_format", "FMT"]
