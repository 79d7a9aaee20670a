"""The custom pass registry: passes by name, in registration order (GE's PassRegistrationData).

    register_custom_pass("SplitAbs").custom_allocate_stream_pass_fn(split_abs)
    register_custom_pass("FuseGemm").custom_pass_fn(fuse).stage(CustomPassStage.AFTER_INFER_SHAPE)

    @pyge.custom_stream_pass("SplitAbs")
    def split_abs(graph, ctx): ...

A registration is one pass at one stage, as in GE: a graph pass (`custom_pass_fn`) at one of
the graph stages, BEFORE_INFER_SHAPE by default, or a stream pass
(`custom_allocate_stream_pass_fn`, which sets AFTER_ASSIGN_LOGIC_STREAM). GE would silently
skip a function whose kind does not fit the stage; pyge refuses the combination when it is
made. Passes of one stage run in registration order.

A name is registered when `register_custom_pass(name)` is called (that fixes its place in the
order); the function may be attached afterwards. Registering a name twice is an error, as in
GE (two plugins would otherwise silently override one another); `unregister_custom_pass`,
`clear_custom_passes` and the `custom_passes_scope()` context manager undo registrations.
Names become part of dump file names, so they are restricted to letters, digits, `_.-`.
"""
from __future__ import annotations

import contextlib
import enum
import logging
import re
import threading
from typing import Any, Callable, Iterator

from ...errors import PassError

log = logging.getLogger(__name__)

StreamPassFn = Callable[..., object]
GraphPassFn = Callable[..., object]
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class CustomPassStage(enum.Enum):
    """Where a custom pass runs, in pipeline order (GE's CustomPassStage). The value is GE's
    name of the stage, as in its logs and in pyge's dump file names. GE's spellings
    (`kBeforeInferShape`, ...) are aliases: `CustomPassStage.kAfterInferShape is
    CustomPassStage.AFTER_INFER_SHAPE`."""
    BEFORE_INFER_SHAPE = "BeforeInferShape"
    AFTER_INFER_SHAPE = "AfterInferShape"
    AFTER_BUILTIN_FUSION_PASS = "AfterBuiltinFusionPass"
    AFTER_ORIGIN_GRAPH_OPTIMIZE = "AfterOriginGraphOptimize"
    AFTER_ASSIGN_LOGIC_STREAM = "AfterAssignLogicStream"
    kBeforeInferShape = "BeforeInferShape"
    kAfterInferShape = "AfterInferShape"
    kAfterBuiltinFusionPass = "AfterBuiltinFusionPass"
    kAfterOriginGraphOptimize = "AfterOriginGraphOptimize"
    kAfterAssignLogicStream = "AfterAssignLogicStream"

    @classmethod
    def parse(cls, stage: Any) -> "CustomPassStage":
        """A stage from a member, its name, GE's spelling or GE's stage string."""
        if isinstance(stage, cls):
            return stage
        if isinstance(stage, str):
            for key, member in cls.__members__.items():
                if stage in (key, member.value):
                    return member
        raise PassError(f"custom pass stage {stage!r} is not accepted; accepted stages: "
                        f"{', '.join(s.name for s in cls)} (or GE's kBeforeInferShape, ...)")

    @property
    def runs_graph_passes(self) -> bool:
        return self is not CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM

    def __str__(self) -> str:
        return self.name


STREAM_STAGE = CustomPassStage.AFTER_ASSIGN_LOGIC_STREAM
GRAPH_STAGES = tuple(s for s in CustomPassStage if s.runs_graph_passes)


def _check_callable(name: str, fn: Any, what: str) -> None:
    if not callable(fn):
        raise PassError(f"custom pass {name!r}: the {what} function must be callable, "
                        f"got {type(fn).__name__}")


class CustomPassRegistration:
    """One registered pass (GE's PassRegistrationData); returned by `register_custom_pass`,
    chainable. Setters as GE's (`custom_pass_fn`, `stage`, `custom_allocate_stream_pass_fn`),
    getters as GE's (`get_pass_name`, `get_stage`, `get_custom_pass_fn`,
    `get_custom_allocate_stream_pass`)."""

    __slots__ = ("name", "origin", "_stream_fn", "_graph_fn", "_stage", "_stage_given")

    def __init__(self, name: str, origin: str):
        self.name = name
        self.origin = origin          # where it was registered (a plugin file, an entry point)
        self._stream_fn: StreamPassFn | None = None
        self._graph_fn: GraphPassFn | None = None
        self._stage = CustomPassStage.BEFORE_INFER_SHAPE    # GE's default
        self._stage_given = False

    def custom_allocate_stream_pass_fn(self, fn: StreamPassFn) -> "CustomPassRegistration":
        """Attach the stream pass `fn(graph, ctx) -> status` (stage AFTER_ASSIGN_LOGIC_STREAM,
        as in GE); returns this registration."""
        _check_callable(self.name, fn, "stream pass")
        if self._graph_fn is not None:
            raise PassError(f"custom pass {self.name!r} already has a graph pass function "
                            "(custom_pass_fn); a registration is one pass at one stage, as in GE: "
                            "register the stream pass under a name of its own")
        if self._stage_given and self._stage is not STREAM_STAGE:
            raise PassError(f"custom pass {self.name!r} is at stage {self._stage}; a stream pass "
                            f"runs at {STREAM_STAGE} only")
        self._stream_fn = fn
        self._stage = STREAM_STAGE
        return self

    def custom_pass_fn(self, fn: GraphPassFn) -> "CustomPassRegistration":
        """Attach the graph pass `fn(graph, ctx) -> status`, run at this registration's stage
        (BEFORE_INFER_SHAPE unless `stage` says otherwise); returns this registration."""
        _check_callable(self.name, fn, "graph pass")
        if self._stream_fn is not None:
            raise PassError(f"custom pass {self.name!r} already has a stream pass function "
                            "(custom_allocate_stream_pass_fn); a registration is one pass at one "
                            "stage, as in GE: register the graph pass under a name of its own")
        if self._stage is STREAM_STAGE:
            raise PassError(self._not_a_graph_stage())
        self._graph_fn = fn
        return self

    def stage(self, stage: CustomPassStage | str) -> "CustomPassRegistration":
        """Choose the stage the pass runs at (GE's Stage); returns this registration."""
        s = CustomPassStage.parse(stage)
        if s is STREAM_STAGE and self._graph_fn is not None:
            raise PassError(self._not_a_graph_stage())
        if s is not STREAM_STAGE and self._stream_fn is not None:
            raise PassError(f"custom pass {self.name!r} is a stream pass, which runs at "
                            f"{STREAM_STAGE} only, not at {s}")
        self._stage, self._stage_given = s, True
        return self

    def _not_a_graph_stage(self) -> str:
        return (f"custom pass {self.name!r}: stage {STREAM_STAGE} runs stream passes "
                "(custom_allocate_stream_pass_fn), not graph passes; graph passes run at "
                + ", ".join(s.name for s in GRAPH_STAGES))

    def get_pass_name(self) -> str:
        return self.name

    def get_stage(self) -> CustomPassStage:
        return self._stage

    def get_custom_pass_fn(self) -> GraphPassFn | None:
        return self._graph_fn

    def get_custom_allocate_stream_pass(self) -> StreamPassFn | None:
        return self._stream_fn

    @property
    def stream_fn(self) -> StreamPassFn | None:
        return self._stream_fn

    @property
    def graph_fn(self) -> GraphPassFn | None:
        return self._graph_fn

    def __repr__(self) -> str:
        fn = getattr(self._stream_fn or self._graph_fn, "__qualname__", None)
        return f"<custom pass {self.name!r} at {self._stage} fn={fn} from {self.origin}>"


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


def custom_graph_pass(name: str, stage: CustomPassStage | str = CustomPassStage.BEFORE_INFER_SHAPE
                      ) -> Callable[[GraphPassFn], GraphPassFn]:
    """Decorator form: registers the function as the graph pass `name` at `stage`, returns it
    unchanged."""
    def deco(fn: GraphPassFn) -> GraphPassFn:
        reg = register_custom_pass(name)
        try:
            reg.stage(stage).custom_pass_fn(fn)
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


def registered_passes(stage: CustomPassStage | str | None = None) -> list[CustomPassRegistration]:
    """The registrations (at `stage`, when given), in registration order (a copy)."""
    with _lock:
        regs = list(_registry)
    if stage is None:
        return regs
    s = CustomPassStage.parse(stage)
    return [r for r in regs if r.get_stage() is s]


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
