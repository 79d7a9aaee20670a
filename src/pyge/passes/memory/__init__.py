"""The memory pass (planner.plan_memory): stream-aware buffer reuse and release points.

    planner.py   the pass: which values are planned, the trials, release points
    blocks.py    near-linear best-fit packing over free blocks
    pack.py      greedy-by-size packing, the Item type, alignment
    events.py    the memory events the planner may add, and their removal
    minimal.py   of the edges a packer chose, those the final offsets need
"""
