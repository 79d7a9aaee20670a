"""The `pyge` command: compile, run, streams, profile, demo, tune.

    app.py       the command table (name -> parser builder, handler), main(), one-line errors
    parsers.py   one parser builder per command and the flags they share
    args.py      checked values (counts, paths to write, inputs to read) for argparse
    commands.py  the work of compile, run, streams, profile and demo
    tune.py      the work of tune
    models.py    reading a model of any kind; inputs from the command line
    table.py     plain-text tables and number formatting

Exit status: 0 on success; 1 when the work fails (a model that cannot be read, compiled or
run); 2 for a command line that cannot be carried out (unknown command or flag, a bad count
or path, malformed KEY=VALUE, unknown option key or malformed option value); 130 when
interrupted. A failure prints one line, `pyge: error: <what went wrong>` (`pyge CMD: error:
...` for the command line), on standard error; --debug (or PYGE_DEBUG=1) shows the traceback
instead. Building the parser imports neither torch nor numpy: `pyge --help` starts fast.
"""
from __future__ import annotations

from .app import COMMANDS, build_parser, main

__all__ = ["main", "build_parser", "COMMANDS"]
