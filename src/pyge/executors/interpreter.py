"""The reference interpreter: a graph's nodes run one after another in topological order,
on the calling thread, with no plan, no streams and no buffer reuse.

Two users: the kernel tests, which run models with it (:func:`run_reference`), and every
executor, which runs the bodies of control-flow nodes (If, Loop, Scan, SequenceMap) with it.
A kernel with a body gets its runner through ``KernelContext.compile_subgraph``; the
executors set that to :func:`subgraph_compiler`, so kernels never import executors.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import ExecutionError
from ..ir.graph import Graph
from ..kernels._util import describe, held
from ..kernels.build import SubgraphCompiler, build_kernel
from ..kernels.convert import to_numpy, to_torch
from .codegen import ANY, element_error, results_error, value_kind


def subgraph_compiler(device: Any) -> SubgraphCompiler:
    """What kernels built for `device` compile their bodies with: the reference interpreter
    (a body runs inside its node's kernel, on that node's stream)."""
    return lambda graph: compile_reference(graph, device)


def compile_reference(graph: Graph, device: Any = "cpu") -> Callable[[list, dict], list]:
    """Kernels for every node of `graph`, built once; returns
    runner(inputs: list, outer: dict[name, value]) -> list of graph outputs, where `outer`
    holds the outer-scope values a body reads (its own inputs shadow them)."""
    order = graph.topological_sort()
    kernels = [build_kernel(n, device, subgraph_compiler(device)) for n in order]
    consts = {name: held(to_torch(v.const, device)) for name, v in graph.initializers.items()}
    in_names = [v.name for v in graph.inputs]
    out_names = [v.name for v in graph.outputs]
    plans = []
    read = {id(v) for n in order for v in (*n.inputs, *(n.implicit_inputs() if n.subgraphs else ()))}
    read.update(id(v) for v in graph.outputs)
    for n, k in zip(order, kernels):
        names = [v.name if v is not None else None for v in n.inputs]
        names += [v.name for v in n.implicit_inputs()] if n.subgraphs else []
        kinds = [value_kind(o.kind, o.dtype) if id(o) in read else ANY for o in n.outputs]
        plans.append((n, k, names, [o.name for o in n.outputs], kinds))

    def run(inputs: list, outer: dict) -> list:
        env = dict(outer)
        env.update(consts)
        env.update(zip(in_names, inputs))
        for n, k, names, outs, kinds in plans:
            args = [env[nm] if nm is not None else None for nm in names]
            try:
                res = k(args)
                _check(res, outs, kinds)
            except ExecutionError:
                raise
            # SystemExit too: a kernel calling sys.exit() must not end the caller's program
            except (Exception, SystemExit) as err:  # noqa: BLE001 - name the node, keep the cause
                raise ExecutionError(describe(n), err) from err
            env.update(zip(outs, res))
        return [env[nm] for nm in out_names]

    return run


def _check(res: Any, outs: list[str], kinds: list[int]) -> None:
    """Raise if a kernel's result is not a list of its node's outputs, each of its kind
    (codegen.value_kind), so that the node is named, not the next one reading the result."""
    err = results_error(res, len(outs))
    for x, name, want in zip(res, outs, kinds) if err is None else ():
        err = err or element_error(x, want, name)
    if err is not None:
        raise err


def run_reference(graph: Graph, feeds: dict[str, Any], device: Any = "cpu") -> dict[str, Any]:
    """Run `graph` with numpy feeds in topological order; returns numpy outputs by name."""
    runner = compile_reference(graph, device)
    inputs = [to_torch(feeds[v.name], device) for v in graph.inputs]
    outs = runner(inputs, {})
    return {v.name: to_numpy(o) for v, o in zip(graph.outputs, outs)}
