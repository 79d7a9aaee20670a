"""pyge's graph IR. Imports no other pyge layer."""
from .builder import GraphBuilder
from .cycles import describe_cycle, find_cycle
from .graph import OPTIONAL, SEQUENCE, TENSOR, Graph, Node, Value
from .printer import format_graph, format_node

__all__ = ["Graph", "Node", "Value", "GraphBuilder", "format_graph", "format_node",
           "TENSOR", "SEQUENCE", "OPTIONAL", "find_cycle", "describe_cycle"]
