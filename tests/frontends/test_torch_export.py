"""pyge.from_torch (torch.export -> ATen -> ONNX-op IR).

Every converted module is checked against torch eager on the same input three ways: the
graph exported to ONNX and run by onnxruntime (a reference no one here wrote, and a check
that the graph means the same in ONNX terms), pyge's reference interpreter, and
pyge.compile(...).run. Tolerances (float32): rtol 1e-4, atol 1e-5.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pyge
from pyge.errors import ModelLoadError, UnsupportedOperatorError
from pyge.frontends.onnx_proto import graph_to_model
from pyge.frontends.torch_export import OPSET, from_torch
from pyge.executors.interpreter import run_reference

RTOL, ATOL = 1e-4, 1e-5


# ---------------------------------------------------------------------------------------
# test modules, written by hand (torchvision-style building blocks)


class Inception(nn.Module):
    """A googlenet / inception_v3-style input transform, stem and inception block."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8, eps=1e-3)
        self.b1 = nn.Conv2d(8, 4, 1)
        self.b2 = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU(inplace=True),
                                nn.Conv2d(4, 6, (1, 7), padding=(0, 3)),  # inception_v3's 1x7
                                nn.Conv2d(6, 6, (7, 1), padding=(3, 0)))
        self.b3 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                nn.Conv2d(8, 2, 1))
        self.b4 = nn.AvgPool2d(3, stride=1, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.drop = nn.Dropout(0.4)
        self.fc = nn.Linear(20, 10)

    def forward(self, x):
        # torchvision's transform_input: per-channel re-normalisation through select/cat
        norm = [(0.458, -0.03), (0.448, -0.088), (0.45, -0.188)]
        x = torch.cat([x[:, i:i + 1] * s + b for i, (s, b) in enumerate(norm)], 1)
        x = torch.cat([x[:, 0].unsqueeze(1), x[:, 1:]], 1)
        x = F.relu(self.bn(self.stem(x)))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        x = torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)
        return self.fc(self.drop(torch.flatten(self.pool(x), 1)))


class Residual(nn.Module):
    """A resnet basic block with a strided 1x1 downsample, then an uneven-free adaptive pool."""

    def __init__(self):
        super().__init__()
        self.stem = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv1 = nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.down = nn.Sequential(nn.Conv2d(4, 8, 1, stride=2, bias=False), nn.BatchNorm2d(8))
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + self.down(x))
        return self.fc(self.pool(y).flatten(1))


class Encoder(nn.Module):
    """A pre-norm transformer encoder block; attention written with matmul and softmax."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(0.1),
                                nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class TorchAttention(nn.Module):
    """nn.MultiheadAttention and F.scaled_dot_product_attention, with a tanh GELU."""

    def __init__(self, d=16):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        a, _ = self.mha(x, x, x)
        q = x.unflatten(-1, (2, 8)).transpose(1, 2)
        s = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).flatten(2)
        return F.gelu(self.ln(x + a + s), approximate="tanh")


class Zoo(nn.Module):
    """Elementwise, reduction, indexing and shape ops a model zoo uses."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 6))
        self.prelu = nn.PReLU(3)

    def forward(self, x):                                   # x: (2, 3, 4, 6)
        y = F.relu6(x * 3) + F.hardtanh(x) - torch.clamp(x, min=-0.5) * F.silu(x)
        y = y + F.hardswish(x) / (1 + torch.sigmoid(x)) + torch.tanh(x) ** 2
        y = y * self.scale + F.leaky_relu(x, 0.2) + self.prelu(x) + F.elu(x)
        z = torch.sqrt(x.abs() + 1) + torch.rsqrt(x * x + 1) + torch.exp(-x.abs())
        m = torch.where(x > 0, y, z).masked_fill(x < -1, 0.25)
        r = m.mean(dim=(2, 3), keepdim=True) + m.amax(-1, keepdim=True) + m.sum(1, keepdim=True)
        s = r[:, 1:, ::2, :5].permute(0, 2, 1, 3)           # slice, permute
        t = torch.stack([s[:, 0], s[:, 1]], dim=1).unsqueeze(0).squeeze(0)
        idx = torch.tensor([2, 0])
        u = t.index_select(3, idx) + t[..., 4:5].expand(-1, -1, -1, 2)
        v = F.pad(u, (1, 2, 0, 1), value=0.5).to(torch.float64).sum(-1).float()
        w = torch.softmax(x.flatten(2), -1).log_softmax(1).max(dim=-1).values
        return v, w + x.argmax(-1).float().sum(-1) + (x.int() // 2).float().amin((2, 3))


class Zoo2(nn.Module):
    """Multi-output ops (max.dim, split, unbind), integer maths, lookups and rarer activations."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)

    def forward(self, x, ids):                              # x: (2, 4, 6), ids: (2, 4) int64
        vals, idx = x.max(dim=1)
        a, b = x.split([2, 2], dim=1)
        rows = x.unbind(0)
        e = self.emb(ids) + a.repeat(1, 2, 1) + rows[1] - torch.maximum(a, b).repeat(2, 2, 1)[:2]
        f = F.softplus(x, beta=2.0) + F.mish(x) + F.hardsigmoid(x)
        f = f + torch.round(x * 3) - torch.floor(x)
        g = torch.clamp(x, min=x.mean(), max=x.amax(-1, keepdim=True)) + torch.minimum(x, x.flip(0))
        h = x.var(dim=-1, keepdim=True) + torch.remainder(x, 0.7)
        h = h + x[:, [3, 1]].sum(1, keepdim=True)
        k = (ids % 3 + torch.div(ids, 2, rounding_mode="trunc") + (ids & 6) + (ids | 1)).float()
        flags = ((x > 0).any(-1) & (x < 2).all(-1)).float() + (ids != 4).float()
        out = e + f + g + h + vals.unsqueeze(1) + idx.unsqueeze(1)
        out = out + k.unsqueeze(-1) + flags.unsqueeze(-1)
        return out, x.argmax().float(), F.gelu(x).sum(-1, dtype=torch.float64)


class NormsAndResize(nn.Module):
    """Group norm, a transposed convolution and the interpolation modes."""

    def __init__(self):
        super().__init__()
        self.gn, self.gn_plain = nn.GroupNorm(2, 4), nn.GroupNorm(2, 4, affine=False)
        self.up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):                                   # x: (1, 4, 5, 5)
        return (self.up(self.gn(x)), self.gn_plain(x), F.interpolate(x, scale_factor=2),
                F.interpolate(x, size=(7, 9), mode="bilinear"),
                F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                F.interpolate(x, size=(8, 11), mode="nearest-exact"))


def _check(module: nn.Module, *inputs: torch.Tensor, compile_too: bool = True) -> pyge.Graph:
    module.eval()
    with torch.no_grad():
        want = module(*inputs)
    want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
    g = from_torch(module, tuple(inputs))
    feeds = {v.name: x.numpy() for v, x in zip(g.inputs, inputs)}
    assert [v.name for v in g.outputs] == [f"output_{i}" for i in range(len(want))]
    for v in g.values().values():  # every value typed, with static shapes
        assert v.dtype is not None and v.shape is not None, v
        assert all(isinstance(d, int) for d in v.shape), v
    mp = graph_to_model(g)
    onnx.checker.check_model(mp, full_check=True)
    sess = ort.InferenceSession(mp.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, w in zip(sess.run(None, feeds), want):
        np.testing.assert_allclose(got, w, rtol=RTOL, atol=ATOL, err_msg="onnxruntime")
    ref = run_reference(g, feeds)
    for i, w in enumerate(want):
        np.testing.assert_allclose(ref[f"output_{i}"], w, rtol=RTOL, atol=ATOL, err_msg="reference")
    if compile_too:
        out = pyge.compile(g).run(feeds)
        for i, w in enumerate(want):
            np.testing.assert_allclose(out[f"output_{i}"], w, rtol=RTOL, atol=ATOL,
                                       err_msg="compiled")
    return g


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomise_bn(m: nn.Module) -> nn.Module:
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return m


# ---------------------------------------------------------------------------------------
# numerics


def test_inception_block():
    g = _check(_randomise_bn(Inception()), torch.randn(2, 3, 32, 32))
    ops = {n.op_type for n in g.nodes}
    assert {"Conv", "BatchNormalization", "MaxPool", "AveragePool", "Concat", "GlobalAveragePool",
            "Gemm"} <= ops
    assert "Dropout" not in ops and "Identity" not in ops


def test_residual_block():
    g = _check(_randomise_bn(Residual()), torch.randn(2, 4, 32, 32))
    pools = [n for n in g.nodes if n.op_type == "AveragePool"]
    assert pools and pools[0].attrs["kernel_shape"] == [4, 4]  # 8x8 -> 2x2


def test_transformer_encoder_block():
    g = _check(Encoder(), torch.randn(2, 5, 16))
    ops = {n.op_type for n in g.nodes}
    assert {"LayerNormalization", "MatMul", "Softmax", "Gelu", "Split", "Transpose"} <= ops


def test_torch_attention_modules():
    _check(TorchAttention(), torch.randn(2, 6, 16))


def test_norms_transposed_conv_and_resize():
    g = _check(NormsAndResize(), torch.randn(1, 4, 5, 5))
    assert {"ConvTranspose", "InstanceNormalization", "Resize"} <= {n.op_type for n in g.nodes}


def test_op_zoo():
    _check(Zoo(), torch.randn(2, 3, 4, 6))


def test_op_zoo_multi_output_and_integers():
    g = _check(Zoo2(), torch.randn(2, 4, 6), torch.randint(0, 10, (2, 4)))
    assert g.inputs[1].dtype == "int64"


# ---------------------------------------------------------------------------------------
# the graph's shape: names, types, initializers


def test_names_types_and_initializers():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, image, bias):
            y = self.bn(self.conv(image))
            return y + bias, image

    g = _check(Two(), torch.randn(1, 3, 8, 8), torch.randn(4, 1, 1))
    assert g.opset_imports[""] == OPSET
    assert [v.name for v in g.inputs] == ["image", "bias"]
    assert [v.name for v in g.outputs] == ["output_0", "output_1"]
    assert g.outputs[1].producer.op_type == "Identity"      # an input returned as is
    names = {n.name for n in g.nodes}
    assert {"conv2d", "_native_batch_norm_legit_no_training"} <= names  # FX node names kept
    assert len(names) == len(g.nodes)
    # parameters and buffers keep their state-dict names; the unused counter is dropped
    assert {"conv.weight", "conv.bias", "bn.running_mean", "bn.running_var"} <= set(g.initializers)
    assert "bn.num_batches_tracked" not in g.initializers
    assert g.value("output_0").shape == (1, 4, 6, 6)


def test_constant_ops_fold_into_initializers():
    class Pos(nn.Module):
        def forward(self, x):
            pos = torch.arange(x.shape[1], dtype=torch.float32) * 0.5
            return x + pos + torch.ones(4) * 2

    g = _check(Pos(), torch.randn(3, 4))
    assert {n.op_type for n in g.nodes} == {"Add"}


def test_dynamic_batch():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                      nn.Linear(4 * 8 * 8, 3)).eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    g = from_torch(m, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    assert g.inputs[0].name == "input" and isinstance(g.inputs[0].shape[0], str)
    compiled = pyge.compile(g)
    for n in (2, 5):  # the flatten's Reshape reads the batch size from the input's Shape
        x = torch.randn(n, 3, 8, 8)
        want = m(x).detach().numpy()
        got = run_reference(g, {"input": x.numpy()})["output_0"]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(compiled.run({"input": x.numpy()})["output_0"], want,
                                   rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------
# errors


def test_unsupported_ops_are_all_listed():
    class Odd(nn.Module):
        def forward(self, x):
            y = torch.fft.fft(x).real                # unsupported ...
            return torch.linalg.det(y.relu())        # ... and so is an op below it

    with pytest.raises(UnsupportedOperatorError) as info:
        from_torch(Odd(), (torch.randn(2, 3, 3),))
    missing = info.value.missing
    assert any("fft" in op for op in missing), missing
    assert any("det" in op or "lu" in op for op in missing), missing
    assert all(isinstance(name, str) and name for name in missing.values())


def test_training_flags_are_restored():
    m = Residual().train()
    m.down.eval()
    from_torch(m, (torch.randn(1, 4, 16, 16),))
    assert m.training and m.conv1.training and not m.down.training and not m.down[1].training


def test_unsupported_configuration_is_listed():
    m = nn.AdaptiveAvgPool2d((3, 3))  # 8 is not a multiple of 3: uneven windows
    with pytest.raises(UnsupportedOperatorError, match="adaptive_avg_pool2d"):
        from_torch(m, (torch.randn(1, 2, 8, 8),))


def test_untraceable_module_raises_model_load_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:   # Python control flow on a tensor's value
                return x * 2
            return x

    with pytest.raises(ModelLoadError, match="DataDependent") as info:
        from_torch(DataDependent(), (torch.randn(3),))
    assert "\n" not in str(info.value)


def test_not_a_module():
    with pytest.raises(ModelLoadError, match="torch.nn.Module"):
        from_torch(lambda x: x, (torch.randn(3),))


# ---------------------------------------------------------------------------------------
# regressions found by the model-zoo audit


def _run_dynamic(m: nn.Module, example: tuple, dynamic_shapes, *others: tuple) -> None:
    """Convert with dynamic_shapes; check the compiled graph on the example and `others`."""
    m.eval()
    g = from_torch(m, example, dynamic_shapes=dynamic_shapes)
    compiled = pyge.compile(g)
    for args in (example,) + others:
        with torch.no_grad():
            want = m(*args)
        want = want if isinstance(want, tuple) else (want,)
        out = compiled.run({v.name: a.numpy() for v, a in zip(g.inputs, args)})
        for i, w in enumerate(want):
            np.testing.assert_allclose(out[f"output_{i}"], w.numpy(), rtol=RTOL, atol=ATOL)


def test_adaptive_avg_pool_with_dynamic_batch():
    # Only the spatial dims need to be static; a dynamic batch used to be refused.
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    pooled = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d((3, 3)))
    batch = torch.export.Dim("batch", min=1, max=16)
    for mod in (m, pooled):
        _run_dynamic(mod, (torch.randn(2, 3, 8, 8),), ({0: batch},), (torch.randn(5, 3, 8, 8),))


def test_creation_ops_with_dynamic_sizes():
    # arange(T) (positions), full/zeros(B, ...) (an RNN's initial state, a causal mask) and
    # *_like of a dynamic input become Range / Expand instead of being refused.
    class Make(nn.Module):
        def forward(self, x):
            b, t = x.shape[0], x.shape[1]
            pos = torch.arange(t) * 0.5
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            return (x + pos.unsqueeze(-1), x.new_zeros(b, 3) + 2, torch.full_like(x, 1.5) * x,
                    torch.arange(1, t, 2).float(), mask.sum(-1))

    batch, seq = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("seq", min=4, max=32)
    _run_dynamic(Make(), (torch.randn(2, 6, 4),), ({0: batch, 1: seq},), (torch.randn(3, 9, 4),))


def test_resize_and_group_norm_with_dynamic_batch():
    # Resize to a given size and GroupNorm needed the whole output shape static.
    class Up(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = nn.GroupNorm(2, 4)

        def forward(self, x):
            return (F.interpolate(self.gn(x), size=(7, 9), mode="bilinear"),
                    F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
                    F.group_norm(x, 2))

    batch = torch.export.Dim("batch", min=1, max=16)
    _run_dynamic(Up(), (torch.randn(2, 4, 5, 6),), ({0: batch},), (torch.randn(3, 4, 5, 6),))


def test_repeat_with_dynamic_sizes():
    # A SymInt in repeat's counts (e.g. InstanceNorm's affine params repeated per batch) used
    # to crash the converter with a raw TypeError.
    class Rep(nn.Module):
        def forward(self, x, w):
            return w.repeat(x.shape[0], 1) + x, w.repeat(2, x.shape[0], 1)

    batch = torch.export.Dim("batch", min=2, max=16)
    _run_dynamic(Rep(), (torch.randn(2, 3), torch.randn(1, 3)), ({0: batch}, None),
                 (torch.randn(5, 3), torch.randn(1, 3)))


def test_one_hot_assert_overload_is_skipped():
    # F.one_hot checks its ids with aten._assert_async.msg; only .default was skipped.
    class OneHot(nn.Module):
        def forward(self, ids, x):
            return F.one_hot(ids, 6).float() * x, F.one_hot(ids, 7)

    _check(OneHot(), torch.tensor([[0, 5, 2], [1, 1, 3]]), torch.randn(2, 3, 6))


def test_gather_scatter_sort_topk_cumsum():
    # Were refused as unsupported; F.cross_entropy / nll_loss decompose to gather.
    class Idx(nn.Module):
        def forward(self, x, idx, ids, mask):
            v, i = x.topk(3, dim=-1)
            s, j = x.sort(dim=1, descending=True)
            pos = mask.cumsum(-1) * mask - 1                   # HF-style position ids
            return (torch.gather(x, 2, idx), x.scatter(2, idx, -x[..., :2]),
                    x.scatter_add(-1, idx, torch.ones(2, 5, 2)), x.scatter(1, idx[:, :1], 0.5),
                    x.scatter_reduce(2, idx, x[..., 2:4], "amax"), v, i, s, j,
                    torch.argsort(ids, dim=-1, stable=True), x.cumsum(1), pos,
                    F.cross_entropy(x[:, 0], ids[:, 0] % 6))

    _check(Idx(), torch.randn(2, 5, 6), torch.randint(0, 6, (2, 5, 2)),
           torch.randint(0, 4, (2, 6)), torch.tensor([[0, 1, 1, 1, 0, 1], [1, 1, 1, 0, 0, 0]]))


def test_vector_norms():
    # linalg_vector_norm (x.norm, F.normalize, cosine_similarity) was refused as unsupported.
    class Norm(nn.Module):
        def forward(self, x):
            return (x.norm(), x.norm(p=1, dim=-1), torch.linalg.vector_norm(x, float("inf"), 1),
                    x.norm(p=3, dim=(0, 2), keepdim=True), F.normalize(x, dim=-1),
                    F.cosine_similarity(x, x.flip(0), dim=-1))

    _check(Norm(), torch.randn(2, 5, 6))


def test_instance_norm_and_batch_norm_without_running_stats():
    # nn.InstanceNorm* (no running stats by default) and BatchNorm(track_running_stats=False)
    # lower to _native_batch_norm_legit.no_stats, which was refused as unsupported.
    class Norms(nn.Module):
        def __init__(self):
            super().__init__()
            self.inst, self.plain = nn.InstanceNorm2d(4, affine=True), nn.InstanceNorm2d(4)
            self.bn = nn.BatchNorm2d(4, track_running_stats=False)
            self.inst1d = nn.InstanceNorm1d(4, affine=True)
            nn.init.uniform_(self.inst.weight, 0.5, 1.5), nn.init.uniform_(self.inst.bias, -1, 1)

        def forward(self, x):
            return self.inst(x), self.plain(x), self.bn(x * 2 + 1), self.inst1d(x.flatten(2))

    _check(Norms(), torch.randn(2, 4, 5, 6))
    batch = torch.export.Dim("batch", min=1, max=16)
    _run_dynamic(nn.InstanceNorm2d(4, affine=True), (torch.randn(2, 4, 5, 5),), ({0: batch},),
                 (torch.randn(3, 4, 5, 5),))


def test_adaptive_max_pool():
    # Global (CBAM / SE-style) and evenly tiled adaptive max pools were refused as unsupported.
    class Pools(nn.Module):
        def forward(self, x):
            return (F.adaptive_max_pool2d(x, 1), F.adaptive_max_pool2d(x, (2, 3)),
                    F.adaptive_max_pool1d(x.flatten(2), 1))

    _check(Pools(), torch.randn(2, 3, 6, 6))
    with pytest.raises(UnsupportedOperatorError, match="adaptive_max_pool2d"):
        from_torch(nn.AdaptiveMaxPool2d(4), (torch.randn(1, 2, 6, 6),))  # uneven windows


def test_more_unary_math():
    # Were refused as unsupported (log1p also blocked BCE-with-logits; elu's scale F.selu).
    class Math(nn.Module):
        def forward(self, x, n):
            return (torch.log1p(x.abs()), torch.expm1(x), torch.log1p(x * 1e-6) * 1e6,
                    torch.expm1(x * 1e-6) * 1e6, x.tan(), x.atan(), x.clamp(-1, 1).asin(),
                    x.clamp(-1, 1).acos(), x.sinh(), x.cosh(), x.asinh(),
                    (x.abs() + 1).acosh(), x.clamp(-0.9, 0.9).atanh(), x.abs().log2(),
                    x.abs().log10(), x.trunc(), x.frac(), torch.fmod(x, 0.3), torch.fmod(n, -3),
                    F.selu(x), F.celu(x, 0.5),
                    F.binary_cross_entropy_with_logits(x, x.flip(0).sigmoid()))

    _check(Math(), torch.randn(2, 5, 6) * 2, torch.randint(-9, 9, (2, 5)))


def test_softplus_honours_a_small_threshold():
    # The threshold was dropped: right above threshold=3, log(1 + e^3) - 3 = 0.049, so
    # nn.Softplus(beta=2, threshold=3) was off by up to 0.02.
    class Sp(nn.Module):
        def forward(self, x):
            return F.softplus(x, 2, 3), F.softplus(x, 1, 1), F.softplus(x), F.softplus(x, 0.5)

    _check(Sp(), torch.linspace(-4, 4, 41))


def test_index_with_several_index_tensors():
    # x[i, j] (HF's logits[arange(B), lengths] pooling; bicubic / trilinear resizes and
    # F.unfold decompose to it) was refused as unsupported; now GatherND.
    class Idx(nn.Module):
        def forward(self, x, i, j):
            return (x[i, j], x[:, i, j], x[:, :, i.unsqueeze(-1), j], x[torch.arange(3), j[:1]],
                    F.interpolate(x, scale_factor=2, mode="bicubic"), F.unfold(x, 2, stride=2))

    _check(Idx(), torch.randn(3, 5, 4, 6), torch.tensor([[0, 2], [1, 1]], dtype=torch.int32),
           torch.tensor([3, -1]))


def test_index_tensors_on_separate_dims_are_listed():
    class Apart(nn.Module):
        def forward(self, x, i):
            return x[i, :, i]

    with pytest.raises(UnsupportedOperatorError, match="non-adjacent"):
        from_torch(Apart(), (torch.randn(3, 4, 5), torch.tensor([0, 2])))


def test_index_with_several_index_tensors_dynamic_batch():
    class Pool(nn.Module):
        def forward(self, logits, lengths):
            return logits[torch.arange(logits.shape[0]), lengths]

    batch = torch.export.Dim("batch", min=2, max=16)
    _run_dynamic(Pool(), (torch.randn(4, 7, 3), torch.tensor([6, 0, 3, 2])),
                 ({0: batch}, {0: batch}), (torch.randn(3, 7, 3), torch.tensor([1, 6, 2])))


# ---------------------------------------------------------------------------------------
# output names and return_torch


class _Heads(nn.Module):
    """Returns whatever structure it is built with (a function of x)."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        return self.make(x)


_Out = __import__("collections").namedtuple("_Out", "logits aux")


@pytest.mark.parametrize("make, names", [
    (lambda x: x + 1, ["output_0"]),
    (lambda x: (x + 1, x * 2), ["output_0", "output_1"]),
    (lambda x: ((x + 1, x * 2), x - 1), ["output_0", "output_1", "output_2"]),
    (lambda x: {"logits": x + 1, "aux": x * 2}, ["logits", "aux"]),
    (lambda x: _Out(x + 1, x * 2), ["logits", "aux"]),
    (lambda x: {"logits": x + 1, "aux": (x * 2, x - 1)}, ["logits", "aux.0", "aux.1"]),
    (lambda x: (x + 1, {"k": x * 2}), ["output_0", "output_1.k"]),
    (lambda x: {"same": x, "y": x.relu()}, ["same", "y"]),          # an input returned under a key
], ids=["tensor", "tuple", "nested-tuple", "dict", "namedtuple", "dict-of-tuple", "tuple-with-dict",
        "dict-of-input"])
def test_outputs_keep_the_modules_keys(make, names):
    x = torch.randn(2, 3)
    with torch.no_grad():
        flat = torch.utils._pytree.tree_leaves(make(x))
    g = from_torch(_Heads(make), (x,))
    assert [v.name for v in g.outputs] == names
    out = pyge.compile(g).run({"x": x.numpy()})
    assert list(out) == names
    for name, want in zip(names, flat):
        np.testing.assert_allclose(out[name], want.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


def test_a_key_that_names_an_input_is_made_unique_with_a_warning(caplog):
    g = from_torch(_Heads(lambda x: {"x": x * 2}), (torch.randn(2),))
    assert [v.name for v in g.outputs] == ["x_1"]
    assert "output 'x' of _Heads is named 'x_1'" in caplog.text


def test_outputs_are_numpy_by_default_and_torch_tensors_with_return_torch(tmp_path):
    x = torch.randn(2, 3)
    make = lambda x: {"logits": x + 1, "ids": x.argmax(1)}    # noqa: E731
    with torch.no_grad():
        want = make(x)
    numpy_model = pyge.compile(from_torch(_Heads(make), (x,)))
    assert numpy_model.return_torch is False
    assert all(isinstance(v, np.ndarray) for v in numpy_model({"x": x.numpy()}).values())
    model = pyge.compile(from_torch(_Heads(make), (x,), return_torch=True))
    assert model.return_torch is True
    for out in (model({"x": x}), model([x.numpy()]), model.run({"x": x}, output_names=["ids", "logits"])):
        assert set(out) == {"logits", "ids"}
        for k, v in out.items():
            assert isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dtype == want[k].dtype, k
            torch.testing.assert_close(v, want[k])
    logits, ids = model.run(["logits", "ids"], {"x": x})     # onnxruntime's call: tensors too
    assert isinstance(logits, torch.Tensor) and isinstance(ids, torch.Tensor)
    model.save(tmp_path / "m.pgm")                            # the choice travels with the model
    assert isinstance(pyge.compile(tmp_path / "m.pgm")({"x": x})["logits"], torch.Tensor)
    model.return_torch = False                                # and can be changed on one model
    assert isinstance(model({"x": x})["logits"], np.ndarray)
