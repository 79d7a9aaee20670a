"""What pyge.compile does about streams when the user sets no stream option.

    cpu   GE's own rules (no policy): on engine clusters, with ge.streamMaxParallelNum=1, they
          put one engine's nodes on one stream, which on the light models of the onnx package
          is the single-stream plan. A multi-stream plan splits a small machine's cores between
          the streams' threads, so no policy is faster than single stream on every model
          (benchmarks/bench_policies_cpu.py; figures in docs/performance.md), and none may be
          the default; `pyge tune` finds the models where more streams pay.
    cuda  GE's rules too, until a GPU measurement says otherwise. The simulator
          (tuning/simulator.py) recommends list_schedule over pyge.maxStreams streams on the
          branchy CNNs; that recommendation is CUDA_CANDIDATE. benchmarks/gpu_bench.py measures
          it on a GPU, and it becomes the default only once measured there, never slower than
          single stream. Until then the reference example behaves on cuda exactly as on cpu.

GE's behaviour stays one option away: `pyge.streamPolicy=ge` (or any explicit stream option)
turns the default off. The default applies only when none of STREAM_OPTIONS is given, so
the reference example (which sets none, on cpu) is unchanged.
"""
from __future__ import annotations

# Any of these in the user's options means "the user decided": no default is added.
STREAM_OPTIONS = ("ge.enableSingleStream", "ge.streamMaxParallelNum", "ge.autoMultistreamParallelMode",
                  "pyge.streamPolicy", "pyge.policyFile", "pyge.maxStreams", "pyge.costFile",
                  "pyge.streamAllocation")

# The simulator's recommendation for CUDA, not yet measured on a GPU (see above).
CUDA_CANDIDATE: dict[str, str] = {"pyge.streamPolicy": "list_schedule"}

_DEFAULTS: dict[str, dict[str, str]] = {
    "cpu": {},
    "cuda": {},
}


def default_policy(device: str) -> dict[str, str]:
    """The options pyge adds for `device` ("cpu", "cuda", "cuda:N") when the user gave no
    stream option; an empty dict means GE's rules."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    return dict(_DEFAULTS[kind])


def with_default_policy(options, device: str) -> dict[str, str]:
    """`options` (a dict, an Options or None) as a dict, plus the device's default policy
    unless a stream option is already set. What pyge.compile calls before parsing options:

        opts = parse_options(with_default_policy(options, dev))
    """
    raw = getattr(options, "raw", options)          # an Options keeps what the user gave in .raw
    opts = {k: v for k, v in dict(raw or {}).items()}
    if any(k in opts for k in STREAM_OPTIONS):
        return opts
    return {**default_policy(device), **opts}
