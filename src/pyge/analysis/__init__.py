"""Graph and plan algorithms shared by the passes, the executors, tuning and profiling.

    happens_before.py   vector clocks over a plan's nodes, for a given edge set
    dag.py              topological order, bottom levels, longest paths, list scheduling

Imports only pyge.ir and pyge.plan (and pyge.errors), so that any layer may use it.
"""
