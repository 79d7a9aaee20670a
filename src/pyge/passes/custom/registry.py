"""The custom stream pass registry: passes by name, in registration order.

    register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(split_abs)

    @pyge.custom_stream_pass("SplitAbs")
    def split_abs(graph, ctx): ...

A name is registered when `register_custom_pass(name)` is called (that fixes its place in the
order); the function may be attached afterwards. Registering a name twice is an error, as in
GE (two plugins would otherwise silently override one another); `unregister_custom_pass`,
`clear_custom_passes` and the `custom_passes_scope()` context manager undo registrations.
Names become part of dump file names, so they are restricted to letters, digits, `_.-`.
"""
from __future__ import annotations

import contextlib
import logging
import re
import threading
from typing import Callable, Iterator

from ...errors import PassError

log = logging.getLogger(__name__)

StreamPassFn = Callable[..., object]
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class CustomPassRegistration:
    """One registered pass; returned by `register_custom_pass`, chainable."""

    __slots__ = ("name", "origin", "_stream_fn")

    def __init__(self, name: str, origin: str):
        self.name = name
        self.origin = origin          # where it was registered (a plugin file, an entry point)
        self._stream_fn: StreamPassFn | None = None

    def custom_allocate_stream_pass_fn(self, fn: StreamPassFn) -> "CustomPassRegistration":
        """Attach the stream pass `fn(graph, ctx) -> status`; returns this registration."""
        if not callable(fn):
            raise PassError(f"custom pass {self.name!r}: the stream pass function must be callable, "
                            f"got {type(fn).__name__}")
        self._stream_fn = fn
        return self

    @property
    def stream_fn(self) -> StreamPassFn | None:
        return self._stream_fn

    def __repr__(self) -> str:
        fn = getattr(self._stream_fn, "__qualname__", None)
        return f"<custom pass {self.name!r} fn={fn} from {self.origin}>"


_lock = threading.RLock()
_registry: list[CustomPassRegistration] = []
_origin = threading.local()   # set by the plugin loader while it imports a file


def _current_origin() -> str:
    return getattr(_origin, "value", None) or "the program"


@contextlib.contextmanager
def registering_from(origin: str) -> Iterator[None]:
    """Registrations made inside are attributed to `origin` (used by the plugin loader)."""
    old = getattr(_origin, "value", None)
    _origin.value = origin
    try:
        yield
    finally:
        _origin.value = old


def register_custom_pass(name: str) -> CustomPassRegistration:
    """Register a custom pass by name (GE: REGISTER_CUSTOM_PASS(name))."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PassError(f"custom pass name {name!r} is not accepted; accepted names: "
                        "letters, digits, '_', '.', '-' (at least one character)")
    with _lock:
        for reg in _registry:
            if reg.name == name:
                raise PassError(f"custom pass {name!r} is already registered (from {reg.origin}); "
                                "pass names must be unique (unregister_custom_pass(name) removes one)")
        reg = CustomPassRegistration(name, _current_origin())
        _registry.append(reg)
    log.debug("registered custom pass %s from %s", name, reg.origin)
    return reg


def custom_stream_pass(name: str) -> Callable[[StreamPassFn], StreamPassFn]:
    """Decorator form: registers the function as the stream pass `name`, returns it unchanged."""
    def deco(fn: StreamPassFn) -> StreamPassFn:
        reg = register_custom_pass(name)
        try:
            reg.custom_allocate_stream_pass_fn(fn)
        except PassError:
            unregister_custom_pass(name)
            raise
        return fn
    return deco


def unregister_custom_pass(name: str) -> bool:
    """Remove the pass `name`; returns whether it was registered."""
    with _lock:
        for i, reg in enumerate(_registry):
            if reg.name == name:
                del _registry[i]
                return True
    return False


def clear_custom_passes() -> None:
    with _lock:
        _registry.clear()


def registered_passes() -> list[CustomPassRegistration]:
    """The registrations, in registration order (a copy)."""
    with _lock:
        return list(_registry)


def restore_registry(saved: list[CustomPassRegistration]) -> None:
    with _lock:
        _registry[:] = saved


@contextlib.contextmanager
def custom_passes_scope() -> Iterator[None]:
    """Passes registered or removed inside the block are undone when it ends.

        with pyge.custom_passes_scope():
            pyge.register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(split_abs)
            model = pyge.compile(g)
    """
    saved = registered_passes()
    try:
        yield
    finally:
        restore_registry(saved)
