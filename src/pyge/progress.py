"""A tiny progress display on standard error, shown only when stderr is a terminal.

    with progress.task("compiling model.onnx"):     # a spinner, after half a second
        model = pyge.compile(g)
    with progress.bar(100, "running") as bar:       # a bar with a count
        for _ in range(100):
            model.run(feeds); bar.advance()

Nothing is drawn when stderr is not a TTY (pipes, CI, tests) or when PYGE_NO_PROGRESS is set,
so output that is captured stays clean. Both forms erase their line when they finish.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

_SPIN = "|/-\\"
_DELAY = 0.5        # seconds before anything is drawn: quick work shows nothing


def enabled(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    if os.environ.get("PYGE_NO_PROGRESS"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Display:
    """Shared drawing: a background thread redraws every 0.1 s until closed."""

    def __init__(self, desc: str, stream: TextIO | None = None):
        self.desc = desc
        self.stream = stream if stream is not None else sys.stderr
        self.on = enabled(self.stream)
        self.start = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def __enter__(self):
        if self.on:
            self._thread = threading.Thread(target=self._loop, name="pyge-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self._width:
                self._write("\r" + " " * self._width + "\r")

    def _loop(self) -> None:
        if self._stop.wait(_DELAY):
            return
        tick = 0
        while not self._stop.is_set():
            line = self.render(tick, time.perf_counter() - self.start)
            self._write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
            tick += 1
            self._stop.wait(0.1)

    def _write(self, s: str) -> None:
        try:
            self.stream.write(s)
            self.stream.flush()
        except (OSError, ValueError):
            self._stop.set()

    def render(self, tick: int, elapsed: float) -> str:
        raise NotImplementedError


class task(_Display):
    """A spinner with the elapsed time, for work whose length is not known in advance."""

    def render(self, tick: int, elapsed: float) -> str:
        return f"{_SPIN[tick % len(_SPIN)]} {self.desc} ({elapsed:.1f} s)"


class bar(_Display):
    """A bar for `total` steps; call advance() after each."""

    def __init__(self, total: int, desc: str, stream: TextIO | None = None, width: int = 30):
        super().__init__(desc, stream)
        self.total = max(int(total), 1)
        self.done = 0
        self.bar_width = width

    def advance(self, n: int = 1) -> None:
        self.done = min(self.done + n, self.total)

    def render(self, tick: int, elapsed: float) -> str:
        frac = self.done / self.total
        full = int(frac * self.bar_width)
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (f"{self.desc} [{'#' * full}{'.' * (self.bar_width - full)}] "
                f"{self.done}/{self.total} {elapsed:.1f} s, about {eta:.1f} s left")


__all__ = ["task", "bar", "enabled"]
