"""The light models shipped in the onnx wheel (onnx/backend/test/data/light), and the seeded
random feeds the CPU benchmarks give them. Imported by the benchmarks and by their child
processes (which get this folder on PYTHONPATH through child_env)."""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import numpy as np
import onnx

LIGHT_DIR = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
HERE = Path(__file__).resolve().parent


def model_path(name: str) -> str:
    """The light model's file; from $PYGE_BENCH_MODEL_DIR when a benchmark set one (models
    with random weights, written by the parent process)."""
    folder = os.environ.get("PYGE_BENCH_MODEL_DIR")
    return str((Path(folder) if folder else LIGHT_DIR) / f"light_{name}.onnx")


def random_feeds(path: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 feeds for every graph input that is not an initializer
    (free dimensions set to 1)."""
    m = onnx.load(path, load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value or 1 for d in v.type.tensor_type.shape.dim]
                                        ).astype(np.float32)
            for v in m.graph.input if v.name not in init}


def write_random_weight_models(names: list[str], folder: str) -> None:
    """The light models `names` with random weights of their real size
    (pyge.testing.random_weights) as files in `folder`, for model_path to find there."""
    from pyge.testing import light_path, random_weights
    for name in names:
        mp = random_weights(onnx.load(light_path(name)))
        onnx.save(mp, str(Path(folder) / f"light_{name}.onnx"))


def child_env(extra: dict | None = None) -> dict:
    """This process's environment for a benchmark child: the source tree and this folder
    first on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(HERE.parent / "src"), str(HERE)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra or {})
    return env


def timed_calls(fns: dict, calls: int, tick) -> dict:
    """Median microseconds per call of each function of `fns`, called in turn `calls` times
    after five warm-up calls each, timed by `tick` (time.perf_counter or a CPU clock)."""
    for f in fns.values():
        for _ in range(5):
            f()
    times = {k: [] for k in fns}
    for _ in range(calls):
        for k, f in fns.items():
            t0 = tick()
            f()
            times[k].append(tick() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}
