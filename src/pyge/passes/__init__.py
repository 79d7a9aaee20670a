"""Compiler passes, one per file, in folders by phase: graph/ (run once per compilation),
then streams/, policies/, custom/, sync/, memory/ and verify/ (once per compiled model).
pipeline.py is the pass machinery, conditions.py the facts passes require and ensure; the
order is stated in pyge/compiler.py."""
