"""CustomPassContext: what a custom graph pass gets next to the graph (GE's CustomPassContext).

One context per pass call: the pass's name, the compile options, and a place for the pass to
leave an error message that the compiler reports when the pass fails. GE's StreamPassContext
(context.py) extends the same four with stream ids.
"""
from __future__ import annotations

import threading

from ...options import Options


class CustomPassContext:
    """Handed to a graph pass as `fn(graph, ctx)`."""

    def __init__(self, options: Options, pass_name: str = ""):
        self._options = options
        self._pass_name = pass_name
        self._error = ""
        self._lock = threading.Lock()

    @property
    def pass_name(self) -> str:
        return self._pass_name

    def get_pass_name(self) -> str:
        return self._pass_name

    def set_error_message(self, message: str) -> None:
        """The message the compiler reports if the pass fails (returns a failure status or raises)."""
        with self._lock:
            self._error = str(message)

    def get_error_message(self) -> str:
        with self._lock:
            return self._error

    def get_option_value(self, key: str) -> str | None:
        """A compile option's string value (or its default); None for a key pyge does not know.
        An automatic stream mode set by an earlier graph pass as a graph attribute shows here."""
        return self._options.get_string(key)

    def _close(self) -> None:
        """Nothing to close: a graph pass changes the model only through its graph, which the
        compiler detaches when the call returns (the runner's timeout path calls this)."""

    def __repr__(self) -> str:
        return f"<CustomPassContext pass={self._pass_name!r}>"


__all__ = ["CustomPassContext"]
