"""The check_ops pass: every operator of the graph and its subgraphs has a kernel.

Run before anything else looks at operators, so that a model with operators pyge cannot run
fails at once with one UnsupportedOperatorError that lists them all (each with one node
using it), rather than at the first kernel build.
"""
from __future__ import annotations

from ...errors import UnsupportedOperatorError
from ...ir.graph import Graph
from ...kernels.registry import is_supported, opset_of


def unsupported_ops(graph: Graph) -> dict[str, str]:
    """Operator ("domain.Op" outside the default domain) -> the first node using it, for
    every operator of `graph` and its subgraphs without a kernel at its opset."""
    missing: dict[str, str] = {}
    for g in graph.all_graphs():
        for n in g.nodes:
            if not is_supported(n.op_type, n.domain, opset_of(n)):
                key = f"{n.domain + '.' if n.domain else ''}{n.op_type}"
                missing.setdefault(key, n.name)
    return missing


def check_ops(graph: Graph) -> None:
    """Raise UnsupportedOperatorError listing every operator without a kernel."""
    missing = unsupported_ops(graph)
    if missing:
        raise UnsupportedOperatorError(missing)
