"""Random DAGs for the stream-pass property tests: Sum nodes n0, n1, ... over one input x,
each reading 1..max_inputs distinct earlier values (from the last `window` when given);
the last node is the graph output."""
from __future__ import annotations

from hypothesis import strategies as st

import pyge


@st.composite
def sum_dags(draw, max_nodes: int, max_inputs: int, window: int | None = None) -> pyge.Graph:
    n = draw(st.integers(2, max_nodes))
    b = pyge.GraphBuilder("rand")
    vals = [b.input("x", "float32", (4,))]
    for i in range(n):
        pool = vals[-window:] if window else vals
        k = draw(st.integers(1, min(max_inputs, len(pool))))
        ins = draw(st.lists(st.sampled_from(pool), min_size=k, max_size=k, unique_by=id))
        vals.append(b.op("Sum", ins, name=f"n{i}"))
    b.graph.outputs.append(vals[-1])
    return b.build()
