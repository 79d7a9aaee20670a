"""Device names pyge accepts: "cpu", "cuda" and "cuda:N". Checked where a device is given
(pyge.compile, pyge.Session, pyge.load_model), before any work."""
from __future__ import annotations

from typing import Any

from .errors import OptionError


def check_device(device: Any) -> str:
    """`device` as a string, or OptionError naming it and the accepted values."""
    d = str(device)
    if d == "cpu" or d == "cuda" or (d.startswith("cuda:") and d[5:].isdigit()):
        return d
    raise OptionError(f"unknown device {device!r}; accepted values: cpu, cuda, cuda:N")
