"""Dropout: the identity (with an all-true mask) unless training is on (is_test=0 before
opset 7, the training_mode input from opset 12); then a random mask, the kept values
scaled by 1 / (1 - ratio)."""
from __future__ import annotations

import torch

from ._util import scalar
from .registry import register


@register("Dropout")
def dropout(ctx):
    n_out = ctx.num_outputs
    # The mask is bool from opset 10, the data's type before.
    bool_mask = ctx.opset >= 10
    ratio_attr = ctx.attr("ratio", 0.5)
    train_attr = ctx.opset < 7 and not ctx.attr("is_test", 0)
    inputs_form = ctx.opset >= 12  # ratio and training_mode became inputs
    # Inference (training_mode absent, or a constant false) never reads the ratio: no host
    # read of a device value, which a CUDA graph capture would refuse.
    training_const = ctx.const_input(2) if inputs_form else None
    inference = inputs_form and (not ctx.has_input(2) or (
        training_const is not None and training_const.size > 0 and not training_const.reshape(-1)[0]))

    def fn(xs):
        x = xs[0]
        training = train_attr
        ratio = ratio_attr
        if inference:
            training = False
        elif inputs_form:
            training = len(xs) > 2 and xs[2] is not None and bool(scalar(xs[2]))
            ratio = scalar(xs[1]) if training and len(xs) > 1 and xs[1] is not None else 0.5
        if not training or ratio == 0:
            if n_out == 1:
                return [x]
            mask = torch.ones(x.shape, dtype=torch.bool if bool_mask else x.dtype, device=x.device)
            return [x, mask]
        keep = torch.rand(x.shape, device=x.device) >= ratio
        y = x * keep / (1.0 - ratio)
        return [y, keep if bool_mask else keep.to(x.dtype)][:n_out]
    return fn
