"""Run a scenario of rank_worker.py on N ranks of 127.0.0.1, as torchrun would.

The test process plays torchrun's agent: it hosts the TCPStore on a port the kernel picks
(bind to port 0: no race with parallel runs for a "free" port), and every rank connects to
it as a client (TORCHELASTIC_USE_AGENT_STORE=True, torchrun's own switch), with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, so pyge initialises the group from the
environment as it does under torchrun. Each rank writes its results, step by step, to
rank<R>.json; a rank still running after `timeout_s` is killed, so nothing hangs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

WORKER = Path(__file__).with_name("rank_worker.py")
HOST = "127.0.0.1"


def launch(scenario: str, folder: Path, world: int = 2, timeout_s: float = 90.0) -> dict:
    """Run `scenario` on `world` ranks; returns {"ranks": [results per rank], "codes": [...],
    "output": [stdout+stderr per rank], "seconds": wall time}."""
    import torch.distributed as dist
    store = dist.TCPStore(HOST, 0, world, is_master=True, timeout=timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    env = {**os.environ, "MASTER_ADDR": HOST, "MASTER_PORT": str(store.port),
           "WORLD_SIZE": str(world), "TORCHELASTIC_USE_AGENT_STORE": "True",
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    procs = []
    for r in range(world):
        log = open(folder / f"rank{r}.log", "w")
        procs.append((subprocess.Popen([sys.executable, str(WORKER), scenario, str(folder)],
                                       env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                       stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for p, log in procs:
        left = max(1.0, timeout_s - (time.monotonic() - t0))
        try:
            codes.append(p.wait(timeout=left))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
        log.close()
    del store
    results, outputs = [], []
    for r in range(world):
        path = folder / f"rank{r}.json"
        results.append(json.loads(path.read_text()) if path.exists() else {})
        outputs.append((folder / f"rank{r}.log").read_text()[-4000:])
    return {"ranks": results, "codes": codes, "output": outputs, "seconds": time.monotonic() - t0}
