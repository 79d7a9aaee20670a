"""Box scenes shared by the NonMaxSuppression tests."""
from __future__ import annotations

import numpy as np


def clustered_centres(rng, b: int, n: int):
    """A detector's output, as (centre xy, width-height) arrays of shape [b, n, 2]: 20
    jittered boxes around each of n // 20 objects, so most of them overlap a better one."""
    k = max(n // 20, 1)
    c = rng.uniform(0, 60 * np.sqrt(k), (b, k, 2))
    size = rng.uniform(20, 80, (b, k, 1))
    pick = rng.integers(0, k, (b, n))
    xy = np.take_along_axis(c, pick[..., None], 1) + rng.normal(0, 3, (b, n, 2))
    wh = np.take_along_axis(size, pick[..., None], 1) * rng.uniform(0.8, 1.25, (b, n, 2))
    return xy, wh
