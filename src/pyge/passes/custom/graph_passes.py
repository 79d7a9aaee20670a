"""Custom graph passes (GE's CustomPassFn): user passes that rewrite the graph at a stage.

    register_custom_pass("FuseGemm").custom_pass_fn(fuse).stage(CustomPassStage.AFTER_INFER_SHAPE)

`stage_pass(stage)` is the compiler Pass that runs the graph passes registered at `stage`, in
registration order, once per compilation (pyge/compiler.py puts one at each stage). Each
call is ``fn(graph, ctx)`` with the compiler's working `pyge.Graph` and a CustomPassContext,
and is handled as GE handles it: GRAPH_SUCCESS goes on, any other return or an exception
stops compilation with CustomPassError(name, code, message). As for stream passes, a call
runs on a helper thread and is given up after `pyge.customPassTimeout` seconds, and a pass
may not compile a model from inside its call.

After each call the compiler takes the graph back (detach.py: sealed, then copied), checks it
(graph_check.py: structure and interface on what the pass returned; kernels and types on the
copy) and re-runs the built-in steps of earlier stages whose facts a rewrite may undo (the
`redo` the compiler gives: the collectives' preparation, engine assignment); whatever is
wrong fails as the pass's CustomPassError, the message saying what. Only then does the copy
become the working graph. Nothing the caller owns is changed: the working graph is the
compiler's own copy, whose shared weights the pass sees read-only.

A graph attribute in GRAPH_OPTION_ATTRS (`graph.set_attr("ge.autoMultistreamParallelMode",
"LoadBalance:2")`) overrides the compile option of that name from then on, as in GE, where
the graph attribute has priority over the option (its autotune sample is such a pass). A
value the pass sets is checked as the option would be and, when wrong, reported as the pass's
error; one the caller's graph carries is taken at the first stage.

Dumps (level 2, dumps/config.py): before and after each call (the "after" one also when the
pass fails), and GE's stage dump of the checked graph after a stage where a pass ran.
"""
from __future__ import annotations

import logging
import numbers
from typing import Any, Callable, Sequence

from ...errors import CustomPassError, OptionError, PassError, PygeError, text_of
from ...dumps.config import GE_STAGE_DUMPS, graph_pass_stage
from ..conditions import OWNED
from ..pipeline import UNCHANGED, CompileState, Pass, PassResult
from . import graph_check
from .context import GRAPH_SUCCESS, GraphStatus
from .detach import Handover
from .pass_context import CustomPassContext
from .registry import CustomPassRegistration, CustomPassStage, registered_passes
from .runner import _PassTimeout, _inside, _invoke

log = logging.getLogger(__name__)

GRAPH_OPTION_ATTRS = ("ge.autoMultistreamParallelMode",)

Redo = Callable[[CompileState], Any]


def stage_pass(stage: CustomPassStage | str, redo: Sequence[Redo] = ()) -> Pass:
    """The compiler Pass that runs the graph passes of `stage`, named custom_<stage>."""
    s = CustomPassStage.parse(stage)
    if not s.runs_graph_passes:
        raise PassError(f"stage {s} runs stream passes, not graph passes")

    def run(st: CompileState) -> PassResult:
        return run_graph_stage(st, s, redo)
    return Pass(f"custom_{s.name.lower()}", run, requires=(OWNED,))


def run_graph_stage(st: CompileState, stage: CustomPassStage, redo: Sequence[Redo] = ()) -> PassResult:
    """Run the graph passes registered at `stage` on `st.graph`, each checked and adopted."""
    ran = []
    for reg in registered_passes(stage):
        if reg.graph_fn is None:
            log.warning("custom pass %s (from %s) at stage %s has no graph pass function; skipped",
                        reg.name, reg.origin, stage)
            continue
        _run_one(st, stage, reg, redo)
        ran.append(reg.name)
    if ran and st.dumper is not None:
        st.dumper.stage(GE_STAGE_DUMPS[stage.value], st.graph)
    try:
        more = _graph_options(st, st.graph, None)     # the caller's graph may carry one too
    except OptionError as err:
        raise OptionError(f"graph {st.graph.name!r}: {err}") from err
    if not ran and not more:
        return UNCHANGED
    return PassResult(True, f"passes: {', '.join(ran) or 'none'}; options from graph attributes: "
                            f"{', '.join(f'{k}={v}' for k, v in more.items()) or 'none'}")


def _run_one(st: CompileState, stage: CustomPassStage, reg: CustomPassRegistration,
             redo: Sequence[Redo]) -> None:
    name = reg.name
    outer = getattr(_inside, "pass_name", None)
    if outer is not None:
        raise CustomPassError(outer, "reentrant", "the pass compiled a model from inside its call; "
                              "a nested compilation would run the custom passes again without end",
                              kind="pass")
    graph = st.graph
    handover = Handover(graph)
    snap = graph_check.snapshot(graph)
    ctx = CustomPassContext(st.options, name)
    who = f"custom graph pass {name!r}"
    _dump(st, stage, name, graph, before=True)
    log.debug("running graph pass %s at stage %s on graph %s", name, stage, graph.name)
    try:
        ret = _invoke(name, reg.graph_fn, graph, ctx, float(st.options["pyge.customPassTimeout"]))
    except _PassTimeout:
        graph.seal(who)
        raise _error(name, stage, "timeout", f"the pass did not return within "
                     f"{float(st.options['pyge.customPassTimeout']):g} s (option pyge.customPassTimeout)") from None
    # SystemExit too: a pass calling sys.exit() must not end the user's program.
    except (Exception, SystemExit) as err:  # noqa: BLE001 - any failure of user code stops compilation, named
        graph.seal(who)
        msg = f"{type(err).__name__}: {text_of(err)}"
        if ctx.get_error_message():
            msg += f"; pass message: {ctx.get_error_message()}"
        raise _error(name, stage, "exception", msg) from err
    finally:
        _dump(st, stage, name, graph, before=False)
    graph.seal(who)      # from now on the IR's methods refuse every edit of it, from any thread
    _check_status(name, stage, ret, ctx)
    st.graph = _adopt(st, stage, name, handover, snap, redo)


def _check_status(name: str, stage: CustomPassStage, ret: Any, ctx: CustomPassContext) -> None:
    note = ctx.get_error_message()
    if isinstance(ret, bool) or not isinstance(ret, numbers.Integral):
        raise _error(name, stage, repr(ret), f"a graph pass must return a status such as GRAPH_SUCCESS, "
                     f"not {type(ret).__name__}{'; ' + note if note else ''}")
    ret = int(ret)
    if ret != GRAPH_SUCCESS:
        code = GraphStatus(ret) if ret in GraphStatus._value2member_map_ else ret
        raise _error(name, stage, code, note or "(no message)")


def _adopt(st: CompileState, stage: CustomPassStage, name: str, handover: Handover,
           snap: graph_check.Snapshot, redo: Sequence[Redo]):
    """The checked copy of the (sealed) graph pass `name` returned (see the module doc)."""
    returned = handover.graph
    # a pass may have edited by plain assignment (a subgraph put into node.attrs), which
    # moves no version: nothing derived from the structure is trusted for the checks
    returned.invalidate()
    try:
        graph_check.structure_problem(returned, snap)
        changed = graph_check.changed_nodes(returned, snap)
        graph = handover.copy()
        graph_check.kernel_problem(graph)
        retyped = graph_check.retype(graph, changed)
    except graph_check.BrokenGraph as err:
        raise _error(name, stage, None, f"left a broken graph: {err}") from err.cause
    log.debug("graph pass %s: %d node(s) changed, %d value(s) typed again", name, len(changed), retyped)
    kept, st.graph = st.graph, graph
    try:
        _graph_options(st, graph, snap.attrs)
    except OptionError as err:
        st.graph = kept
        raise _error(name, stage, None, f"set a graph attribute the compiler cannot take: {err}") from err
    try:
        for step in redo:
            step(st)
    except PygeError as err:
        st.graph = kept
        raise _error(name, stage, None, f"left a graph the compiler cannot go on with: "
                     f"{type(err).__name__}: {text_of(err)}") from err
    return graph


_UNSET = object()


def _graph_options(st: CompileState, graph, before: dict | None) -> dict[str, str]:
    """Merge into st.options the GRAPH_OPTION_ATTRS that `graph` sets to another value than
    st.options has (`before`: the attributes before the pass; only those it changed count).
    OptionError, naming the attribute or the option, for a value the option would refuse."""
    more = {}
    for key in GRAPH_OPTION_ATTRS:
        value = graph.attrs.get(key, _UNSET)
        if value is _UNSET or (before is not None and value == before.get(key, _UNSET)):
            continue
        if not isinstance(value, str):
            raise OptionError(f"graph attribute {key} must be a string such as 'LoadBalance:2', "
                              f"not {type(value).__name__} {value!r}")
        if st.options.get_string(key) != value:
            more[key] = value
    if more:
        st.options = st.options.merged(more)
        log.info("options from graph %s attributes: %s", graph.name, more)
    return more


def _dump(st: CompileState, stage: CustomPassStage, name: str, graph, before: bool) -> None:
    if st.dumper is not None:
        st.dumper.stage(graph_pass_stage(stage.value, name, before), graph)


def _error(name: str, stage: CustomPassStage, code, message: str) -> CustomPassError:
    return CustomPassError(name, code, message, kind="graph pass", stage=stage.name)


__all__ = ["stage_pass", "run_graph_stage", "GRAPH_OPTION_ATTRS", "CustomPassContext"]
