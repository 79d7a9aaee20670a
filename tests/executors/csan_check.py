"""Run by test_cuda.py::test_torch_cuda_sanitizer_finds_no_race on a GPU, in a child process
(PyTorch's CUDA sanitizer installs process-wide hooks): multi-stream eager runs of random
graphs and a light model under torch.cuda._sanitizer, which raises on any two kernel
accesses of one tensor on different streams that no event or stream wait orders.
Prints CSAN-LIVE once it has seen the sanitizer catch a planted race, CSAN-CLEAN at the end.
"""
from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
from torch.cuda._sanitizer import CUDASanitizer, CUDASanitizerErrors

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from executors.helpers import (branch_streams, light_model, random_feeds,  # noqa: E402
                               random_graph, random_streams, replan)

import pyge  # noqa: E402
from pyge.executors.cuda import CudaExecutor  # noqa: E402

san = CUDASanitizer()
san.enable()

# The sanitizer is live: two streams writing one tensor with no order between them.
x = torch.zeros(1 << 16, device="cuda")
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
s1.wait_stream(torch.cuda.current_stream())
s2.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s1):
    x.add_(1)
try:
    with torch.cuda.stream(s2):
        x.mul_(2)
    sys.exit("CSAN-MISSED: the planted race was not reported")
except CUDASanitizerErrors:
    print("CSAN-LIVE", flush=True)
torch.cuda.synchronize()

eager = {"pyge.cudaGraph": "false"}
for seed in range(4):
    single = pyge.compile(random_graph(random.Random(seed), 24), "cpu", {"ge.enableSingleStream": "true"})
    multi = replan(single, random_streams(2 + seed % 3, seed), device="cuda", options=eager)
    for memory in ("pool", "arena"):
        ex = CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
        for r in range(2):
            feeds = random_feeds(single, r)
            got, want = ex.run(feeds), single.run(feeds)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
single = light_model("squeezenet", random=True)
multi = replan(single, branch_streams(3), device="cuda", options=eager)
for memory in ("pool", "arena"):
    ex = CudaExecutor(multi.graph, multi.plan, "cuda", multi.options, memory=memory)
    ex.run(random_feeds(single, 0))
torch.cuda.synchronize()
print("CSAN-CLEAN", flush=True)
