"""GE-style graph dumps (minimal first version: not implemented yet, writes nothing)."""
from __future__ import annotations


class Dumper:
    enabled = False

    @classmethod
    def from_env(cls, graph_id: int) -> "Dumper":
        return cls()

    def stage(self, stage: str, graph, level: int = 2) -> None:
        pass

    def built(self, graph, plan) -> None:
        pass
