"""pyge.from_torch: a torch.nn.Module -> pyge.Graph, through torch.export.

    g = pyge.from_torch(model, (x,))

1. ``torch.export.export(module.eval(), args)`` traces the module into an FX graph of ATen ops.
2. ``run_decompositions`` lowers it to core ATen *except* for the ops our table maps directly
   (``aten.conv2d``, ``aten.linear``, ``aten.layer_norm``, ``aten.softmax.int``, ...): those
   are preserved, so the graph stays close to the user's code (one ``linear`` node instead of
   core ATen's ``permute`` + ``addmm``), and whatever we do not know is lowered to the core
   ops the table covers; a CNN gets no extra nodes.
3. Each FX node goes through the dispatch table ``aten_table.OPS`` (ATen overload -> emitter)
   and becomes one or more ONNX-style nodes (opset ``OPSET``).

Naming (users target nodes by name in custom stream passes):
- The node that produces an FX node's result keeps the FX node's name (``conv2d_3``,
  ``linear_1``, ``add_2``; an eval batch norm is ``_native_batch_norm_legit_no_training[_N]``),
  and so does its output value. Helper nodes are named ``<fx name>_<OpType>``
  (``linear_1_MatMul``). Ops that change no data (``clone``, eval ``dropout``, a same-dtype
  ``_to_copy``, a full slice) emit no node, and dead nodes are dropped.
- Graph inputs keep the placeholder names torch.export derives from the forward's argument
  names (``x``); outputs keep the keys of a returned dict and the fields of a namedtuple
  (``logits``), and are ``output_0``, ``output_1``, ... where only positions are known
  (torch_outputs.py); parameters and buffers are initializers named after their state-dict
  key (``features.0.weight``).
- Ops whose tensor inputs are all constants (``arange``, ``full``, ops on buffers) are
  evaluated here and become initializers named after the FX node.

Every Value carries the dtype and shape of the FX node's ``meta['val']``; with
``dynamic_shapes`` the symbolic dims are strings (``'s0'``).
"""
from __future__ import annotations

import logging
import operator
from typing import Any

import numpy as np
import torch

from ..errors import ModelLoadError, PygeError, UnsupportedOperatorError
from ..ir.graph import Graph, Node, Value, unique_name
from .onnx_proto import dtype_to_onnx
from . import torch_ops  # noqa: F401 - importing it fills OPS with every emitter
from .aten_table import OPS, SKIP, Unsupported, np_dtype
from .torch_outputs import output_names

log = logging.getLogger(__name__)

OPSET = 20          # Gelu is an opset-20 op; everything else we emit is opset <= 18 style
#                     (a graph with attention is raised to opset 23: torch_ops_attention)
FOLD_LIMIT = 1 << 20  # largest constant (elements) we fold at import time
_POISON = object()  # the result of a node we could not convert: its users are skipped quietly


def from_torch(module: torch.nn.Module, example_args: tuple, dynamic_shapes: Any = None, *,
               name: str | None = None, return_torch: bool = False) -> Graph:
    """Trace `module` in eval mode with torch.export and convert it to a pyge Graph.

    `example_args` is the tuple of positional forward arguments (a lone tensor is accepted);
    `dynamic_shapes` is passed to torch.export as is. The module's train/eval flags are
    restored afterwards. Raises ModelLoadError when torch.export cannot trace the module, and
    UnsupportedOperatorError listing every ATen operator that has no mapping (no graph is
    returned then).
    `return_torch=True` makes the compiled model hand its outputs over as torch tensors on
    its device, as the module would, instead of numpy arrays. It is said here, once, where
    the torch user hands the module over (torch.compile's result returns tensors too); the
    graph carries it (metadata pyge.return_torch) into every model compiled from it, and
    `model.return_torch` changes it on one model.
    """
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    flags = {m: m.training for m in module.modules()}
    try:
        ep = _export(module.eval(), example_args, dynamic_shapes)
    finally:
        for m, training in flags.items():
            m.training = training
    g = _Converter(ep, name or type(module).__name__).run()
    if return_torch:
        from ..model import RETURN_TORCH_KEY
        g.metadata[RETURN_TORCH_KEY] = "true"
    return g


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else '(no message)'}"


def _export(module: torch.nn.Module, args: tuple, dynamic_shapes: Any):
    cls = type(module).__name__
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    except Exception as err:  # noqa: BLE001 - torch raises many kinds; keep the cause
        raise ModelLoadError(f"torch.export could not trace {cls}: {_one_line(err)}") from err
    table = torch.export.default_decompositions()
    for target in OPS:
        if target in table:   # preserve the ops we map directly (see the module docstring)
            del table[target]
    try:
        return ep.run_decompositions(table)
    except Exception as err:  # noqa: BLE001
        raise ModelLoadError(f"decomposing the exported {cls} failed: {_one_line(err)}") from err


# ---------------------------------------------------------------------------------------
# per-node context handed to the emitters


class NodeCtx:
    """What an emitter sees: the FX node, its meta, and helpers that add IR nodes."""

    def __init__(self, conv: "_Converter", node: torch.fx.Node):
        self.conv = conv
        self.fx = node
        self.name = node.name
        self.val = node.meta.get("val")

    # -- the FX node's result type ------------------------------------------------------
    @property
    def dtype(self) -> str | None:
        return _meta_type(self._first())[0]

    @property
    def shape(self) -> tuple | None:
        return _meta_type(self._first())[1]

    def static_shape(self) -> tuple | None:
        """The output shape when every dim is a known int, else None."""
        s = self.shape
        return s if s is not None and all(isinstance(d, int) for d in s) else None

    def _first(self):
        v = self.val
        return v[0] if isinstance(v, (list, tuple)) and v else v

    # -- adding nodes --------------------------------------------------------------------
    def out(self, op_type: str, inputs: list, n: int | None = None, **attrs):
        """The node that produces the FX node's result: named after it, typed from its meta."""
        metas = list(self.val) if isinstance(self.val, (list, tuple)) else [self.val]
        n = n if n is not None else len(metas)
        names = [self.name] if n == 1 else [f"{self.name}_{i}" for i in range(n)]
        outs = self.conv.add_node(op_type, self.name, inputs, names, attrs)
        for v, m in zip(outs, metas):
            v.dtype, v.shape = _meta_type(m)
        return outs[0] if n == 1 else list(outs)

    def tmp(self, op_type: str, inputs: list, dtype: str | None = None, shape: tuple | None = None,
            **attrs) -> Value:
        """A helper node named `<fx name>_<OpType>`."""
        name = f"{self.name}_{op_type}"
        (v,) = self.conv.add_node(op_type, name, inputs, [name], attrs)
        v.dtype, v.shape = dtype, shape
        return v

    def const(self, data: Any, tag: str = "const") -> Value:
        return self.conv.add_const(f"{self.name}_{tag}", np.asarray(data))

    def ints(self, values) -> Value:
        return self.const(np.asarray([int(x) for x in values], dtype=np.int64), "ints")

    def scalar(self, x: Any, dtype: str) -> Value:
        return self.const(np.asarray(x, dtype=dtype), "scalar")

    def cast(self, v: Value, dtype: str | None) -> Value:
        if dtype is None or v.dtype == dtype:
            return v
        return self.tmp("Cast", [v], dtype=dtype, shape=v.shape, to=dtype_to_onnx(dtype))

    def as_value(self, x: Any, dtype: str | None) -> Value:
        """A tensor Value cast to `dtype`, or a Python scalar as a 0-d constant of `dtype`."""
        if isinstance(x, Value):
            return self.cast(x, dtype)
        return self.scalar(x, dtype or np_dtype(torch.tensor(x).dtype))  # bool/int64/float32


def _meta_type(m: Any) -> tuple[str | None, tuple | None]:
    if isinstance(m, torch.Tensor):
        return np_dtype(m.dtype), tuple(d if isinstance(d, int) else str(d) for d in m.shape)
    if isinstance(m, (int, torch.SymInt)):
        return "int64", ()
    if isinstance(m, (float, torch.SymFloat)):
        return "float32", ()
    return None, None


# ---------------------------------------------------------------------------------------
# the conversion


class _Converter:
    def __init__(self, ep, name: str):
        self.ep = ep
        self.g = Graph(name)
        self.g.opset_imports = {"": OPSET}
        self.g.doc = f"converted from torch.export of {name}"
        self.env: dict[torch.fx.Node, Any] = {}
        self.missing: dict[str, str] = {}
        self._value_names: set[str] = set()
        self._node_names: set[str] = set()

    def run(self) -> Graph:
        self._inputs()
        for node in self.ep.graph.nodes:
            if node.op == "call_function":
                self._call(node)
            elif node.op == "get_attr":  # a submodule of a control-flow op (cond, map), which
                self.env[node] = _POISON  # is itself listed as unsupported
        if self.missing:
            raise UnsupportedOperatorError(self.missing)
        self._outputs()
        self._remove_dead_nodes()
        self._prune_initializers()
        self.g.sort()
        return self.g

    # -- building blocks used by NodeCtx ---------------------------------------------------
    def add_node(self, op_type: str, name: str, inputs: list, out_names: list[str],
                 attrs: dict) -> list[Value]:
        node = Node(op_type, unique_name(self._node_names, name), attrs=attrs)
        for v in inputs:
            node.append_input(v)
        outs = [node.add_output(Value(unique_name(self._value_names, o))) for o in out_names]
        self.g.add_node(node)
        return outs

    def add_const(self, name: str, data: np.ndarray) -> Value:
        return self.g.add_initializer(unique_name(self._value_names, name), data)

    # -- inputs ------------------------------------------------------------------------------
    def _inputs(self) -> None:
        from torch.export.graph_signature import InputKind
        placeholders = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        for spec in self.ep.graph_signature.input_specs:
            node = placeholders.get(getattr(spec.arg, "name", None))
            if node is None:      # a constant argument torch.export specialised away
                continue
            if spec.kind == InputKind.USER_INPUT:
                meta = node.meta.get("val")
                if not isinstance(meta, torch.Tensor) and not node.users:
                    continue      # a Python number torch.export baked into the graph
                if not isinstance(meta, torch.Tensor):
                    raise ModelLoadError(f"input {node.name!r} is not a tensor "
                                         f"({type(meta).__name__}); only tensors are supported")
                dtype, shape = _meta_type(meta)
                self._value_names.add(node.name)
                self.env[node] = self.g.add_input(Value(node.name, dtype, shape))
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                data = self.ep.state_dict.get(spec.target)
                if data is None:
                    data = self.ep.constants.get(spec.target)
                if not isinstance(data, torch.Tensor):
                    raise ModelLoadError(
                        f"no tensor found for {spec.kind.name.lower()} {spec.target!r}")
                self.env[node] = self.add_const(spec.target, to_numpy(data))
            else:
                raise ModelLoadError(
                    f"unsupported exported input kind {spec.kind.name} ({node.name!r})")

    # -- one FX node ---------------------------------------------------------------------------
    def _call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target in SKIP:
            self.env[node] = None
            return
        args = [self._lookup(a) for a in node.args]
        kwargs = {k: self._lookup(a) for k, a in node.kwargs.items()}
        # Below an op we could not convert, keep going so that every unknown op is listed,
        # but emit nothing: the result is thrown away anyway.
        poisoned = _poisoned(args) or _poisoned(list(kwargs.values()))
        if target is operator.getitem:
            self.env[node] = _POISON if poisoned else self._getitem(node, args)
            return
        if not poisoned and self._try_fold(node, args, kwargs):
            return
        emitter = OPS.get(target)
        if emitter is None:
            self.missing.setdefault(str(target), node.name)
        if emitter is None or poisoned:
            self.env[node] = _POISON
            return
        try:
            self.env[node] = emitter(NodeCtx(self, node), _bind(target, args, kwargs))
        except Unsupported as why:
            self.missing.setdefault(f"{target} ({why})", node.name)
            self.env[node] = _POISON
        except PygeError:
            raise
        except Exception as err:  # noqa: BLE001 - a conversion bug: name the node, keep the cause
            raise ModelLoadError(f"cannot convert FX node {node.name!r} ({target}): "
                                 f"{_one_line(err)}") from err

    def _lookup(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._lookup(x) for x in a)
        return a

    def _getitem(self, node: torch.fx.Node, args: list) -> Any:
        src, idx = args
        item = src[idx] if isinstance(src, (list, tuple)) else None
        if item is None:  # e.g. the indices of max_pool2d_with_indices
            producer = node.args[0]
            self.missing.setdefault(f"{producer.target} output {idx}", producer.name)
            return _POISON
        return item

    def _try_fold(self, node: torch.fx.Node, args: list, kwargs: dict) -> bool:
        """Evaluate an op whose tensor inputs are all initializers (or which has none)."""
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            return False
        if torch.Tag.nondeterministic_seeded in target.tags:  # rand & co: fresh values each run
            return False
        if target.namespace == "_c10d_functional":  # collectives: every rank must run them
            return False
        vals = [v for v in _flat(args + list(kwargs.values())) if isinstance(v, Value)]
        meta = node.meta.get("val")
        if any(v.const is None for v in vals) or not isinstance(meta, torch.Tensor):
            return False
        if not all(isinstance(d, int) for d in meta.shape) or meta.numel() > FOLD_LIMIT:
            return False

        def real(x):
            if isinstance(x, Value):
                return torch.from_numpy(np.array(x.const))
            if isinstance(x, (list, tuple)):
                return type(x)(real(e) for e in x)
            return x
        kw = {k: real(v) for k, v in kwargs.items()}
        if "device" in kw:
            kw["device"] = torch.device("cpu")
        try:
            with torch.no_grad():
                result = target(*real(args), **kw)
        except Exception as err:  # noqa: BLE001 - not foldable here: convert it normally
            log.debug("not folding %s: %s", node.name, err)
            return False
        self.env[node] = self.add_const(node.name, to_numpy(result))
        return True

    # -- outputs -----------------------------------------------------------------------------
    def _outputs(self) -> None:
        from torch.export.graph_signature import OutputKind
        by_name = {n.name: n for n in self.ep.graph.nodes}
        specs = [s for s in self.ep.graph_signature.output_specs
                 if s.kind == OutputKind.USER_OUTPUT]  # not buffer mutations
        names = output_names(self.ep, len(specs))
        for i, spec in enumerate(specs):
            node = by_name.get(getattr(spec.arg, "name", None))
            v = self.env.get(node) if node is not None else None
            if not isinstance(v, Value):
                what = getattr(spec.arg, "value", spec.arg)
                raise ModelLoadError(f"output {i} of {self.g.name} is not a tensor ({what!r}); "
                                     "only tensor outputs are supported")
            name = names[i]
            if v.producer is None or v in self.g.outputs:  # an input, initializer or repeat
                (out,) = self.add_node("Identity", name, [v], [name], {})
                out.dtype, out.shape = v.dtype, v.shape
                v = out
            else:
                self._value_names.discard(v.name)
                v.name = unique_name(self._value_names, name)
            if v.name != name:          # the module's key is an input's or a weight's name too
                log.warning("output %r of %s is named %r: %r names another value",
                            name, self.g.name, v.name, name)
            self.g.outputs.append(v)

    def _remove_dead_nodes(self) -> None:
        # e.g. the ArgMax of a max.dim whose indices nobody reads
        outputs = {id(v) for v in self.g.outputs}
        for node in reversed(self.g.topological_sort()):
            if all(not o.uses and id(o) not in outputs for o in node.outputs):
                self.g.remove_node(node)

    def _prune_initializers(self) -> None:
        for name in [n for n, v in self.g.initializers.items() if not v.uses]:
            del self.g.initializers[name]


def _bind(target: Any, args: list, kwargs: dict) -> dict[str, Any]:
    """Positional and keyword arguments -> {schema argument name: value}, defaults filled in."""
    schema = getattr(target, "_schema", None)
    if schema is None:  # a Python operator (operator.mul on SymInts)
        return {f"arg{i}": a for i, a in enumerate(args)}
    out = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def _flat(xs: Any):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _poisoned(xs: list) -> bool:
    return any(x is _POISON for x in _flat(xs))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes  # shipped with onnx
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy().copy()
