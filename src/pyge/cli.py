"""The `pyge` command: compile, run, streams, profile, demo.

Exit status: 0 on success; 1 when the work fails (a model that cannot be read, compiled or
run); 2 for a command line that cannot be carried out (unknown command or flag, malformed
KEY=VALUE, unknown option key or malformed option value); 130 when interrupted. A failure
prints one line, `pyge: error: <what went wrong>`, on standard error; --debug (or
PYGE_DEBUG=1) shows the traceback instead.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from .cli_models import UsageError, env_flag, key_value

_DESCRIPTION = """\
pyge compiles neural-network models into plans of logical streams and runs the streams
concurrently (worker threads on a CPU, CUDA streams on a GPU). A model is an ONNX file, a
TensorFlow frozen graph (.pb, with the optional extra pyge[tf]) or an offline model (.pgm)
written by `pyge compile`. Without a model, run/streams/profile use a built-in inception-like
block. Start with `pyge demo`."""

_ENVIRONMENT = """\
environment:
  DUMP_GE_GRAPH      1 (full), 2 (without weights), 3 (structure only): dump graphs while compiling
  DUMP_GRAPH_LEVEL   1 (all stages), 2 (default: the stages that matter), 3 (built graph only),
                     or a substring of stage names
  DUMP_GRAPH_PATH    folder for the dumps (default: the current folder)
  PYGE_OPP_PATH      plugin root: <opp>/vendors/<vendor>/custom_fusion_passes/*.py
  ASCEND_OPP_PATH    plugin root used when PYGE_OPP_PATH is not set
  PYGE_DEBUG         1: tracebacks instead of one-line errors (same as --debug)
  PYGE_NO_PROGRESS   1: no progress display on standard error

exit status: 0 success, 1 failure, 2 bad command line or option, 130 interrupted"""


def _options_help() -> str:
    from .options import describe_options
    lines = ["compile options (--option KEY=VALUE, repeatable; GE keys, string values):"]
    for key, default, desc in describe_options():
        shown = default if default else "empty"
        lines.append(f"  {key} (default {shown})")
        lines.append(f"      {desc}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`pyge run: error: ...`) and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _add_model_args(p: argparse.ArgumentParser, optional: bool, options: bool = True) -> None:
    if optional:
        p.add_argument("model", nargs="?", metavar="MODEL",
                       help="an .onnx, .pb or .pgm file (default: the built-in inception-like block)")
    else:
        p.add_argument("model", metavar="MODEL", help="an .onnx or .pb file")
    p.add_argument("--device", default=None, metavar="DEV",
                   help="cpu (one worker thread per stream), cuda or cuda:N (default: cpu; "
                        "for a .pgm, the device it was compiled for)")
    if options:
        p.add_argument("--option", "-O", action="append", type=key_value, metavar="KEY=VALUE",
                       help="a compile option, repeatable (keys and values below)")
    p.add_argument("--pb-inputs", nargs="+", metavar="NODE:0",
                   help="for a .pb: input tensors (default: the Placeholders)")
    p.add_argument("--pb-outputs", nargs="+", metavar="NODE:0",
                   help="for a .pb: output tensors (default: the nodes nothing reads)")
    p.add_argument("--graph-id", type=int, default=None, metavar="N",
                   help="graph id used in dump file names (default: a counter from 1)")


def _add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", action="append", metavar="NAME=FILE.npy",
                   help="an input from a .npy file, repeatable (FILE.npy alone for a one-input model); "
                        "inputs not given are random")
    p.add_argument("--shape", action="append", type=key_value, metavar="NAME=D0,D1,...",
                   help="shape of a random input whose dimensions are unknown or symbolic (default: 1 each)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks and debug logging")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log what the compiler does (INFO level)")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    epilog = _options_help() + "\n\n" + _ENVIRONMENT
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="pyge", description=_DESCRIPTION, epilog=epilog, formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"pyge {__version__}")
    _add_common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, func: str, help: str, description: str, with_epilog: bool = True):
        p = sub.add_parser(name, help=help, description=description, formatter_class=fmt,
                           epilog=epilog if with_epilog else None)
        p.set_defaults(func=func)
        return p

    p = command("compile", "cmd_compile", "compile a model into an offline model (.pgm)",
                "Compile MODEL and write the plan (streams, events, memory plan, weights) to "
                "OUT.pgm, which `pyge run` loads without compiling.")
    _add_model_args(p, optional=False)
    p.add_argument("-o", "--output", required=True, metavar="OUT.pgm", help="the offline model to write")

    p = command("run", "cmd_run", "run a model (or the built-in one) and print its outputs and timing",
                "Compile (or load) MODEL, run it and print its outputs and timing.")
    _add_model_args(p, optional=True)
    _add_input_args(p)
    p.add_argument("--runs", "-n", type=int, default=1, metavar="N", help="timed runs (default: 1)")
    p.add_argument("--warmup", type=int, default=1, metavar="N", help="untimed runs first (default: 1)")
    p.add_argument("--profile", metavar="TRACE.json", help="also profile N runs; write a Chrome/Perfetto trace")
    p.add_argument("--timeline", metavar="PLOT.png", help="also profile N runs; write a per-stream timeline picture")
    p.add_argument("--save-outputs", metavar="DIR", help="write each output to DIR/<name>.npy")

    p = command("streams", "cmd_streams", "show the stream of every node, the events, a per-stream summary",
                "Compile (or load) MODEL and show what the stream passes decided.")
    _add_model_args(p, optional=True)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables (same as --format json)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--plan", action="store_true", help="also print each stream's steps (launch, record, wait)")

    p = command("profile", "cmd_profile", "profile runs: per-stream busy time, overlap, trace, timeline",
                "Compile (or load) MODEL, profile N runs and print the per-stream summary.")
    _add_model_args(p, optional=True)
    _add_input_args(p)
    p.add_argument("--runs", "-n", type=int, default=10, metavar="N", help="profiled runs (default: 10)")
    p.add_argument("--trace", metavar="TRACE.json", help="write a Chrome/Perfetto trace")
    p.add_argument("--timeline", metavar="PLOT.png", help="write a per-stream timeline picture")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    p = command("demo", "demo", "the reference custom stream pass, end to end (no files needed)",
                _demo_description(), with_epilog=False)
    p.add_argument("--out", metavar="DIR", help="folder for dumps, trace and timeline (default: a new temporary folder)")
    p.add_argument("--runs", "-n", type=int, default=20, metavar="N", help="profiled runs per version (default: 20)")

    from .tuning.cli_tune import add_tune_parser
    add_tune_parser(sub).set_defaults(func="tune")
    for p in sub.choices.values():      # --debug / -v on every command, after its own flags
        _add_common(p)
    return parser


def _demo_description() -> str:
    return ("Build the reference graph (two independent operators, one named Abs_1, that the "
            "built-in allocation puts on one stream), compile it without and with the custom "
            "stream pass SplitAbs (which moves Abs_1 to a new stream), write the before/after "
            "graph dumps, run and profile both versions, and print the streams, the Send/Recv "
            "events and the measured overlap; the timeline pictures are written too.")


def _dispatch(args: argparse.Namespace) -> int:
    if args.func == "demo":
        from .demo import run_demo
        return run_demo(out=args.out, runs=args.runs)
    if args.func == "tune":
        from .tuning.cli_tune import run_tune
        return run_tune(args)
    from . import cli_commands
    return getattr(cli_commands, args.func)(args)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.filename and str(err.filename) not in text:
        text = f"{err.filename}: {text}"
    return text


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


class _HeldWarnings(logging.Handler):
    """Without -v/--debug, log warnings wait for the command to end: written to standard error
    (as Python's last-resort handler would) when it succeeds, dropped when it fails, so that a
    failure stays the one `pyge: error:` line (a refused set_stream_id, say, is logged as a
    warning and then repeated in the error)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def write_out(self) -> None:
        for record in self.records:
            print(record.getMessage(), file=sys.stderr)
        self.records.clear()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pyge` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or env_flag("PYGE_DEBUG")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:          # --help, --version, usage errors
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    if args.command is None:
        print("pyge: error: no command given; try 'pyge demo' or 'pyge --help'", file=sys.stderr)
        return 2
    if debug or getattr(args, "verbose", False):
        logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
        return _run(args, debug)
    held = _HeldWarnings()
    logging.getLogger().addHandler(held)
    try:
        code = _run(args, debug)
    finally:
        logging.getLogger().removeHandler(held)
    if code == 0:
        held.write_out()
    return code


def _run(args: argparse.Namespace, debug: bool) -> int:
    from .errors import OptionError, PygeError
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print("pyge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:          # `pyge ... | head`: the reader left; say nothing more
        _silence_stdout()
        return 141
    except BaseException as err:  # noqa: BLE001 - one line unless --debug
        if debug or isinstance(err, SystemExit):
            raise
        if isinstance(err, (PygeError, OSError)):
            print(f"pyge: error: {_one_line(err)}", file=sys.stderr)
            return 2 if isinstance(err, (UsageError, OptionError)) else 1
        print(f"pyge: error: internal error ({type(err).__name__}: {_one_line(err)}); "
              "rerun with --debug for the traceback", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
