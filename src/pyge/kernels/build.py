"""One run-time function per node: find the node's kernel factory for its opset and call it.

Every caller that turns nodes into kernels goes through :func:`build_kernel` (the executors,
the reference interpreter, constant folding, Gradient's forward slice), so a missing kernel
and a factory that fails are reported the same way everywhere, naming the node.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import ExecutionError, PygeError, UnsupportedOperatorError
from ..ir.graph import Graph, Node
from ._util import describe
from .registry import KernelContext, KernelFn, lookup, opset_of

# What compiles a control-flow body: graph -> runner(inputs: list, outer: dict) -> list.
SubgraphCompiler = Callable[[Graph], Callable[[list, dict], list]]


def build_kernel(node: Node, device: Any,
                 compile_subgraph: SubgraphCompiler | None = None) -> KernelFn:
    """The run-time function of `node` on `device`.

    `compile_subgraph` is handed to kernels whose nodes have bodies (If, Loop, Scan,
    SequenceMap, and Gradient's slice when it holds one). The executor layer supplies it:
    kernels never import executors, so the way a body is run is chosen there.
    """
    factory = lookup(node.op_type, node.domain, opset_of(node))
    if factory is None:
        raise UnsupportedOperatorError({f"{node.domain + '.' if node.domain else ''}{node.op_type}": node.name})
    implicit = [v.name for v in node.implicit_inputs()] if node.subgraphs else []
    ctx = KernelContext(node=node, opset=opset_of(node), device=device,
                        compile_subgraph=compile_subgraph, implicit_names=implicit)
    try:
        return factory(ctx)
    except PygeError:
        raise
    except Exception as err:  # noqa: BLE001 - e.g. a constant too large to allocate: name the node
        raise ExecutionError(f"{describe(node)}, preparing its kernel", err) from err
