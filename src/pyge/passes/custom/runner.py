"""Running the stream passes of one compiled model (GE's RunCustomStreamPass).

GE calls the stream passes once per compiled model: once for a static model, and once per
static sub-model of a dynamic-shape model. `run_stream_passes` is that call: it takes the
model's graph, runs the built-in DAG pass (when ge.autoMultistreamParallelMode asks for it)
and then every registered pass, in registration order, each as ``fn(graph, ctx)`` with a
read-only view of the graph and one StreamPassContext shared by all of them. Subgraph nodes
are visible (`get_all_nodes`) but not the passes' to change: control-flow bodies run on their
parent node's stream.

Dumps: `on_stage(stage, graph)` is called before and after each pass call, the "after" one
also when the pass fails, so that the user sees what the pass did before it failed.

A pass that returns anything but GRAPH_SUCCESS, or raises, stops compilation with
CustomPassError(pass name, return code, the pass's message). A call that has not returned
after `pyge.customPassTimeout` seconds (default 120; 0 = no limit) fails the same way, with
return code "timeout": it runs on a helper thread so that the compiler can give up on it
(Python cannot stop a thread; the pass keeps running in the background, but the context is
closed at once and it only ever saw a read-only view of the compiler's clone). A pass may not
compile a model itself: the nested compilation would run the passes again without end.
"""
from __future__ import annotations

import logging
import numbers
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...errors import CustomPassError, text_of
from ...ir.graph import Graph
from ...options import Options, parse_options
from .context import GRAPH_SUCCESS, GraphStatus, StreamBook, StreamPassContext
from .registry import STREAM_STAGE, registered_passes
from .view import ConstGraph

log = logging.getLogger(__name__)

BEFORE_STAGE = "RunCustomPass_BeforeAssignLogicStream"
AFTER_STAGE = "RunCustomPass_AfterAssignLogicStream"

OnStage = Callable[[str, Graph], Any]
StreamFn = Callable[[ConstGraph, StreamPassContext], Any]

_inside = threading.local()     # .pass_name: set on the thread running a pass call


@dataclass
class StreamPassResult:
    """What one call of the stream passes did."""
    max_stream_id: int                                  # largest id drawn, holes included
    custom_ids: list[int] = field(default_factory=list)  # ids the registered passes drew
    changed: list[str] = field(default_factory=list)     # names of nodes whose stream changed
    passes: list[str] = field(default_factory=list)      # the passes that ran, in order


def run_stream_passes(graph: Graph, options: Options | Mapping[str, Any] | None = None,
                      max_stream_id: int | None = None, on_stage: OnStage | None = None) -> StreamPassResult:
    """Run the stream passes on `graph` (one model's graph) once. `max_stream_id` is the
    largest id the built-in allocation drew (default: the largest in use)."""
    opts = parse_options(options)
    if max_stream_id is None:
        max_stream_id = max((n.stream_id for n in graph.nodes), default=-1)
    calls = _calls(opts)
    result = StreamPassResult(max_stream_id=max_stream_id)
    if not calls:
        return result
    outer = getattr(_inside, "pass_name", None)
    if outer is not None:
        raise CustomPassError(outer, "reentrant", "the pass compiled a model from inside its call; "
                              "a nested compilation would run the custom passes again without end")
    before = {id(n): n.stream_id for n in graph.nodes}
    book = StreamBook(max_stream_id)
    ctx = StreamPassContext(graph, opts, book)
    view = ConstGraph(graph)
    timeout = float(opts["pyge.customPassTimeout"])
    try:
        for name, fn, builtin in calls:
            if on_stage is not None:
                on_stage(f"{BEFORE_STAGE}{name}", graph)
            try:
                _call(name, fn, view, ctx, 0.0 if builtin else timeout)
            finally:
                if on_stage is not None:
                    on_stage(f"{AFTER_STAGE}{name}", graph)
            result.passes.append(name)
    finally:
        view._forget()      # its wrappers and it reference each other: no cycle left behind
    builtin_names = {name for name, _, b in calls if b}
    result.max_stream_id = book.max_id
    result.custom_ids = [sid for sid, who in book.allocated if who not in builtin_names]
    result.changed = [n.name for n in graph.nodes if n.stream_id != before[id(n)]]
    return result


def _calls(opts: Options) -> list[tuple[str, StreamFn, bool]]:
    """(name, function, built-in) of every stream pass to run, in order."""
    from ..streams.auto import PASS_NAME, dag_stream_pass
    calls: list[tuple[str, StreamFn, bool]] = []
    dag = dag_stream_pass(opts)
    if dag is not None:
        calls.append((PASS_NAME, dag, True))
    for reg in registered_passes(STREAM_STAGE):   # graph passes run at their own stages
        if reg.stream_fn is None:
            log.warning("custom pass %s (from %s) has no stream pass function; skipped", reg.name, reg.origin)
            continue
        calls.append((reg.name, reg.stream_fn, False))
    return calls


class _PassTimeout(Exception):
    pass


def _invoke(name: str, fn: StreamFn, view: ConstGraph, ctx: StreamPassContext, timeout: float):
    """fn(view, ctx), given up on after `timeout` seconds (0: no limit)."""
    if timeout <= 0:
        return _marked(name, fn, view, ctx)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["ret"] = _marked(name, fn, view, ctx)
        except BaseException as err:  # noqa: BLE001 - handed to the compiling thread
            box["err"] = err

    worker = threading.Thread(target=target, name=f"pyge-custom-pass-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        ctx._close()
        log.warning("custom stream pass %s is still running after %g s; compilation gave up on it "
                    "(it keeps running in the background but can no longer change the model)",
                    name, timeout)
        raise _PassTimeout()
    if "err" in box:
        raise box["err"]
    return box.get("ret")


def _marked(name: str, fn: StreamFn, view: ConstGraph, ctx: StreamPassContext):
    """The pass call, with this thread marked as inside it (see run_stream_passes)."""
    saved = getattr(_inside, "pass_name", None)
    _inside.pass_name = name
    try:
        return fn(view, ctx)
    finally:
        _inside.pass_name = saved


def _call(name: str, fn: StreamFn, view: ConstGraph, ctx: StreamPassContext, timeout: float) -> None:
    log.debug("running stream pass %s on graph %s", name, view.name)
    ctx._begin(name)
    try:
        ret = _invoke(name, fn, view, ctx, timeout)
    except _PassTimeout:
        raise CustomPassError(name, "timeout", f"the pass did not return within {timeout:g} s "
                              "(option pyge.customPassTimeout)") from None
    # SystemExit too: a pass calling sys.exit() must not end the user's program.
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure of user code stops compilation, named
        msg = f"{type(err).__name__}: {text_of(err)}"
        if ctx.get_error_message():
            msg += f"; pass message: {ctx.get_error_message()}"
        raise CustomPassError(name, "exception", msg) from err
    finally:
        ctx._close()   # a context kept by the pass must not change the model after the call
    if isinstance(ret, bool) or not isinstance(ret, numbers.Integral):
        raise CustomPassError(name, repr(ret), f"a stream pass must return a status such as "
                              f"GRAPH_SUCCESS, not {type(ret).__name__}"
                              f"{'; ' + ctx.get_error_message() if ctx.get_error_message() else ''}")
    ret = int(ret)   # numpy integers are statuses too
    if ret != GRAPH_SUCCESS:
        code = GraphStatus(ret) if ret in GraphStatus._value2member_map_ else ret
        raise CustomPassError(name, code, ctx.get_error_message() or "(no message)")
