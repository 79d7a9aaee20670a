"""Custom stream passes (compiler pass 8): user passes run after the built-in allocation.

For the root graph and then every subgraph, each registered pass is called in registration
order as ``fn(graph, ctx)`` with a read-only view of that graph (its direct nodes only) and
a StreamPassContext. A pass that returns anything but GRAPH_SUCCESS, or raises, stops the
compilation with CustomPassError(pass name, return code, the pass's message). Compilation
works on a clone, so the user's graph is untouched either way.

A pass call that has not returned after `pyge.customPassTimeout` seconds (default 120; 0 = no
limit) fails the same way, with return code "timeout". The call runs on a helper thread so
that the compiler can give up on it: Python cannot stop a thread, so a pass that never
returns keeps running in the background, but its context is closed at once (it can no
longer change any stream) and it only ever saw a read-only view of the compiler's clone.
With no limit the pass runs on the calling thread.

A pass may not compile a model itself: the nested compilation would run every custom pass
again, that one included, without end. pyge.compile called from inside a pass call fails at
once with CustomPassError naming the outer pass.
"""
from __future__ import annotations

import logging
import numbers
import threading
from typing import Any, Callable, Mapping

from ...errors import CustomPassError, text_of
from ...ir.graph import Graph
from ...options import Options, parse_options
from .context import (GRAPH_FAILED, GRAPH_PARAM_INVALID, GRAPH_SUCCESS, GraphStatus, StreamBook,
                      StreamPassContext)
from .registry import (CustomPassRegistration, clear_custom_passes, custom_passes_scope,
                       custom_stream_pass, register_custom_pass, registered_passes,
                       unregister_custom_pass)
from .view import ConstGraph, ConstNode, TensorDesc

log = logging.getLogger(__name__)

BEFORE_STAGE = "RunCustomPass_BeforeAssignLogicStream"
AFTER_STAGE = "RunCustomPass_AfterAssignLogicStream"

OnStage = Callable[[str, Graph], Any]

_inside = threading.local()     # .pass_name: set on the thread running a pass call


def run_custom_passes(graph: Graph, options: Options | Mapping[str, Any] | None = None,
                      on_stage: OnStage | None = None) -> set[int]:
    """Run every registered stream pass on `graph` and each subgraph; returns the stream ids
    the passes allocated. `on_stage(stage, g)` is called before and after each pass call."""
    opts = parse_options(options)
    passes = registered_passes()
    if not passes:
        return set()
    outer = getattr(_inside, "pass_name", None)
    if outer is not None:
        raise CustomPassError(outer, "reentrant", "the pass compiled a model from inside its call; "
                              "a nested compilation would run the custom passes again without end")
    book = StreamBook(graph)
    timeout = float(opts["pyge.customPassTimeout"])
    for g in graph.all_graphs():
        view = ConstGraph(g)
        for reg in passes:
            if reg.stream_fn is None:
                log.warning("custom pass %s (from %s) has no stream pass function; skipped",
                            reg.name, reg.origin)
                continue
            if on_stage is not None:
                on_stage(f"{BEFORE_STAGE}{reg.name}", g)
            _call(reg, g, view, StreamPassContext(reg.name, g, opts, book), timeout)
            if on_stage is not None:
                on_stage(f"{AFTER_STAGE}{reg.name}", g)
    return set(book.allocated)


class _PassTimeout(Exception):
    pass


def _invoke(reg: CustomPassRegistration, view: ConstGraph, ctx: StreamPassContext, timeout: float):
    """reg.stream_fn(view, ctx), given up on after `timeout` seconds (0: no limit)."""
    if timeout <= 0:
        return _marked(reg, view, ctx)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["ret"] = _marked(reg, view, ctx)
        except BaseException as err:  # noqa: BLE001 - handed to the compiling thread
            box["err"] = err

    worker = threading.Thread(target=target, name=f"pyge-custom-pass-{reg.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        ctx._close()
        log.warning("custom stream pass %s is still running after %g s; compilation gave up on it "
                    "(it keeps running in the background but can no longer change the model)",
                    reg.name, timeout)
        raise _PassTimeout()
    if "err" in box:
        raise box["err"]
    return box.get("ret")


def _marked(reg: CustomPassRegistration, view: ConstGraph, ctx: StreamPassContext):
    """The pass call, with this thread marked as inside it (see run_custom_passes)."""
    saved = getattr(_inside, "pass_name", None)
    _inside.pass_name = reg.name
    try:
        return reg.stream_fn(view, ctx)
    finally:
        _inside.pass_name = saved


def _call(reg: CustomPassRegistration, g: Graph, view: ConstGraph, ctx: StreamPassContext,
          timeout: float = 0.0) -> None:
    where = "" if g.parent is None else f" (on subgraph {g.name!r} of node {g.parent.name!r})"
    log.debug("running custom stream pass %s on graph %s", reg.name, g.name)
    try:
        ret = _invoke(reg, view, ctx, timeout)
    except _PassTimeout:
        raise CustomPassError(reg.name, "timeout", f"the pass did not return within {timeout:g} s "
                              f"(option pyge.customPassTimeout){where}") from None
    # SystemExit too: a pass calling sys.exit() must not end the user's program.
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure of user code stops compilation, named
        msg = f"{type(err).__name__}: {text_of(err)}"
        if ctx.get_error_message():
            msg += f"; pass message: {ctx.get_error_message()}"
        raise CustomPassError(reg.name, "exception", msg + where) from err
    finally:
        ctx._close()   # a context kept by the pass must not change the model after the call
    if isinstance(ret, bool) or not isinstance(ret, numbers.Integral):
        raise CustomPassError(reg.name, repr(ret), f"a stream pass must return a status such as "
                              f"GRAPH_SUCCESS, not {type(ret).__name__}"
                              f"{'; ' + ctx.get_error_message() if ctx.get_error_message() else ''}{where}")
    ret = int(ret)   # numpy integers are statuses too
    if ret != GRAPH_SUCCESS:
        code = GraphStatus(ret) if ret in GraphStatus._value2member_map_ else ret
        raise CustomPassError(reg.name, code, (ctx.get_error_message() or "(no message)") + where)


__all__ = [
    "run_custom_passes", "register_custom_pass", "custom_stream_pass", "unregister_custom_pass",
    "clear_custom_passes", "registered_passes", "custom_passes_scope", "CustomPassRegistration",
    "StreamPassContext", "GraphStatus", "GRAPH_SUCCESS", "GRAPH_FAILED", "GRAPH_PARAM_INVALID",
    "ConstGraph", "ConstNode", "TensorDesc", "BEFORE_STAGE", "AFTER_STAGE",
]
