"""The verifier (checks.verify_plan): a finished plan checked independently of the passes
that built it. clocks.py recomputes happens-before from the step lists alone; memory.py
checks buffer reuse and release points against it."""
