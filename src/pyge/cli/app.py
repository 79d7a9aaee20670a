"""`pyge`'s entry point: the command table, the top-level parser, one-line errors.

Each command is one row of COMMANDS: the builder of its parser and its handler. A handler is
imported only when its command runs, so `pyge --help` and `pyge CMD --help` never import
torch (nor numpy).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Callable, Sequence

from . import parsers
from .args import UsageError, env_flag

log = logging.getLogger(__name__)

Handler = Callable[[argparse.Namespace], int]


def _lazy(module: str, name: str) -> Handler:
    """A handler that imports `module` (relative to pyge.cli) when it is called."""
    def handler(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module, __package__), name)(args)
    handler.__qualname__ = handler.__name__ = f"{module.lstrip('.')}.{name}"
    return handler


COMMANDS: dict[str, tuple[Callable[..., argparse.ArgumentParser], Handler]] = {
    "compile": (parsers.compile_parser, _lazy(".commands", "cmd_compile")),
    "run": (parsers.run_parser, _lazy(".commands", "cmd_run")),
    "streams": (parsers.streams_parser, _lazy(".commands", "cmd_streams")),
    "profile": (parsers.profile_parser, _lazy(".commands", "cmd_profile")),
    "demo": (parsers.demo_parser, _lazy(".commands", "cmd_demo")),
    "tune": (parsers.tune_parser, _lazy(".tune", "cmd_tune")),
}

_DESCRIPTION = """\
pyge compiles neural-network models into plans of logical streams and runs the streams
concurrently (worker threads on a CPU, CUDA streams on a GPU). A model is an ONNX file, a
TensorFlow frozen graph (.pb, with the optional extra pyge[tf]) or an offline model (.pgm)
written by `pyge compile`. Without a model, run/streams/profile use a built-in inception-like
block. Start with `pyge demo`; `pyge COMMAND --help` shows a command's flags."""

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
    from ..options import describe_options
    lines = ["compile options (-O/--option KEY=VALUE, repeatable; GE keys, string values):"]
    for key, default, desc in describe_options():
        lines.append(f"  {key} (default {default or 'empty'})")
        lines.append(f"      {desc}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`pyge run: error: ...`) and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    parser = _Parser(prog="pyge", description=_DESCRIPTION, formatter_class=parsers.FMT,
                     epilog=_options_help() + "\n\n" + _ENVIRONMENT)
    parser.add_argument("--version", action="version", version=f"pyge {__version__}")
    parsers.add_common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (build, handler) in COMMANDS.items():
        p = build(sub)
        p.set_defaults(handler=handler)
        parsers.add_common(p)            # --debug / -v on every command, after its own flags
    return parser


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


def _log_plugins() -> None:
    """-v: name the plugin files and entry points loaded, and the passes they registered."""
    from ..passes.custom.plugins import ENV_VARS, ensure_plugins_loaded
    report = ensure_plugins_loaded()
    if report.opp_path is None:
        log.info("plugin folder: none (%s not set)", " / ".join(ENV_VARS))
    else:
        log.info("plugin folder: %s", report.opp_path)
    for path in report.files:
        log.info("plugin file loaded: %s", path)
    for ep in report.entry_points:
        log.info("plugin entry point loaded: %s", ep)
    if not report.files and not report.entry_points:
        log.info("no plugin files or entry points loaded")
    elif report.passes:
        log.info("passes registered by plugins: %s", ", ".join(report.passes))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pyge` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or env_flag("PYGE_DEBUG")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:          # --help, --version, usage errors
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    if args.command is None:
        print("pyge: error: no command given; try 'pyge demo' or 'pyge --help'", file=sys.stderr)
        return 2
    if debug or getattr(args, "verbose", False):
        logging.basicConfig(level=logging.DEBUG if debug else logging.INFO,
                            format="%(levelname)s %(name)s: %(message)s")
        return _run(args, debug, verbose=True)
    held = _HeldWarnings()
    logging.getLogger().addHandler(held)
    try:
        code = _run(args, debug)
    finally:
        logging.getLogger().removeHandler(held)
    if code == 0:
        held.write_out()
    return code


def _run(args: argparse.Namespace, debug: bool, verbose: bool = False) -> int:
    from ..errors import OptionError, PygeError
    from .outputs import check_outputs
    try:
        check_outputs(args)              # before any work: no output may be an input
        if verbose:
            _log_plugins()
        return args.handler(args)
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


__all__ = ["main", "build_parser", "COMMANDS"]
