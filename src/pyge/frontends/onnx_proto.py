"""Conversion between ONNX protobufs and the pyge IR (both directions).

Kept out of the IR on purpose (as onnx-ir does): IR classes know nothing of protobufs.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ..errors import GraphCycleError, GraphError, ModelGraphCycleError, ModelLoadError
from ..ir.graph import OPTIONAL, SEQUENCE, TENSOR, Graph, Node, Value, unique_name
from .onnx_write import add_attribute, fill_raw_tensor

# ---------------------------------------------------------------------------------------
# dtypes


def onnx_to_dtype(elem_type: int) -> str | None:
    if elem_type == 0:
        return None
    if elem_type == TensorProto.STRING:
        return "object"
    if elem_type == TensorProto.BFLOAT16:
        return "bfloat16"
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - exotic types (float8, int4): keep the onnx name
        pass
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:  # a code no ONNX version defines (a corrupt or hand-made file)
        raise ModelLoadError(f"unknown ONNX element type {elem_type}") from None


_NP_TO_ONNX = {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16, "int8": TensorProto.INT8, "int16": TensorProto.INT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL, "object": TensorProto.STRING, "complex64": TensorProto.COMPLEX64,
    "complex128": TensorProto.COMPLEX128,
}


def dtype_to_onnx(dtype: str | None) -> int:
    if dtype is None:
        return TensorProto.UNDEFINED
    if dtype in _NP_TO_ONNX:
        return _NP_TO_ONNX[dtype]
    try:
        return getattr(TensorProto, dtype.upper())
    except AttributeError:
        return TensorProto.UNDEFINED


# ---------------------------------------------------------------------------------------
# types


def read_type(v: Value, tp: onnx.TypeProto) -> None:
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        v.kind = TENSOR
        try:
            v.dtype = onnx_to_dtype(tp.tensor_type.elem_type)
        except ModelLoadError as err:
            raise ModelLoadError(f"value {v.name!r} has an {err}") from None
        if tp.tensor_type.HasField("shape"):
            dims = []
            for d in tp.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            v.shape = tuple(dims)
    elif which == "sequence_type":
        v.kind = SEQUENCE
        inner = Value("_")
        read_type(inner, tp.sequence_type.elem_type)
        v.dtype, v.shape = inner.dtype, inner.shape
    elif which == "optional_type":
        v.kind = OPTIONAL
        inner = Value("_")
        read_type(inner, tp.optional_type.elem_type)
        v.dtype, v.shape, v.elem_kind = inner.dtype, inner.shape, inner.kind


def _write_type(v: Value) -> onnx.TypeProto | None:
    if v.dtype is None and v.shape is None:
        return None
    elem = dtype_to_onnx(v.dtype)
    shape = None if v.shape is None else [d if d is not None else None for d in v.shape]
    t = helper.make_tensor_type_proto(elem, shape)
    if v.kind == SEQUENCE:
        return helper.make_sequence_type_proto(t)
    if v.kind == OPTIONAL:
        if v.elem_kind == SEQUENCE:
            t = helper.make_sequence_type_proto(t)
        return helper.make_optional_type_proto(t)
    return t


def value_info(v: Value, name: str | None = None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name or v.name
    tp = _write_type(v)
    if tp is not None:
        vi.type.CopyFrom(tp)
    return vi


# ---------------------------------------------------------------------------------------
# proto -> IR


def _array(tp: TensorProto) -> np.ndarray:
    """A tensor's data as an array. External data must have been read by the loader, from the
    model's folder (onnx_loader.read_external_data): numpy_helper would read it relative to the
    current working folder, whatever file happened to sit there."""
    if tp.data_location == TensorProto.EXTERNAL:
        raise ModelLoadError(f"tensor {tp.name!r} keeps its data in an external file that was not read; "
                             "load the model with pyge.load_onnx (base_dir= for bytes or a ModelProto)")
    return numpy_helper.to_array(tp)


def check_strings(msg, src: str, where: str = "the model") -> None:
    """Refuse a string field that is not valid UTF-8 (a damaged file): protobuf hands such a
    proto2 `string` back as bytes, which every name lookup downstream would trip over.
    Tensors are checked by name only, so that their data is never copied out."""
    if isinstance(msg, onnx.TensorProto):
        if not isinstance(msg.name, str):
            raise ModelLoadError(f"{src}: a tensor name in {where} is not valid UTF-8: {msg.name!r}")
        return
    if isinstance(msg, onnx.NodeProto) and isinstance(msg.name, str) and msg.name:
        where = f"node {msg.name!r}"
    for field, value in msg.ListFields():
        if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
            continue
        for v in (value if field.is_repeated else (value,)):
            if field.type == field.TYPE_MESSAGE:
                check_strings(v, src, where)
            elif not isinstance(v, str):
                raise ModelLoadError(f"{src}: {msg.DESCRIPTOR.name}.{field.name} in {where} is "
                                     f"not valid UTF-8: {v!r}")


def _attr_value(a: AttributeProto, scope: dict[str, Value], opsets: dict[str, int]) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return _array(a.t)
    if t == AttributeProto.GRAPH:
        return graph_from_proto(a.g, outer=scope, opsets=opsets)
    if t == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in a.strings]
    if t == AttributeProto.TENSORS:
        return [_array(x) for x in a.tensors]
    if t == AttributeProto.GRAPHS:
        return [graph_from_proto(g, outer=scope, opsets=opsets) for g in a.graphs]
    if t == AttributeProto.SPARSE_TENSOR:
        return _array(a.sparse_tensor.values)
    if t == AttributeProto.TYPE_PROTO:
        return a.tp
    raise ModelLoadError(f"attribute {a.name!r} has unsupported type {t}")   # a damaged file


def graph_from_proto(gp: onnx.GraphProto, outer: dict[str, Value] | None = None,
                     opsets: dict[str, int] | None = None) -> Graph:
    """Build an IR graph. `outer` maps names visible from an enclosing graph."""
    g = Graph(gp.name or "graph")
    if opsets is not None:
        g.opset_imports = dict(opsets)
    g.doc = gp.doc_string
    scope: dict[str, Value] = dict(outer or {})
    init_names = set()
    # Names defined in this graph -> by what: a name defined twice (not SSA; onnx.checker
    # refuses it) would leave it to load order which definition a reader gets.
    defined: dict[str, str] = {}

    def define(vname: str, by: str) -> None:
        if vname in defined:
            raise ModelLoadError(f"value {vname!r} of graph {g.name!r} is defined twice "
                                 f"(by {defined[vname]} and by {by})")
        defined[vname] = by

    for tp in gp.initializer:
        define(tp.name, "an initializer")
        try:
            arr = _array(tp)
        except Exception as err:  # noqa: BLE001
            raise ModelLoadError(f"initializer {tp.name!r} cannot be read: {err}") from err
        if not arr.flags.writeable and arr.dtype != object:
            # to_array views a bytes copy of raw_data (read-only), and torch.from_numpy cannot
            # share a read-only array: the executors would copy every weight once more and
            # keep both. One writable copy here, the bytes freed with the view.
            arr = arr.copy()
        v = g.add_initializer(tp.name, arr)
        scope[tp.name] = v
        init_names.add(tp.name)
    for sp in gp.sparse_initializer:
        try:
            arr = _sparse_to_dense(sp)
        except Exception as err:  # noqa: BLE001 - bad indices, dims or data: name the tensor
            raise ModelLoadError(f"sparse initializer {sp.values.name!r} cannot be read: {err}") from err
        define(sp.values.name, "an initializer")
        v = g.add_initializer(sp.values.name, arr)
        scope[v.name] = v
        init_names.add(v.name)
    for vi in gp.input:
        if vi.name in init_names:
            # An initializer listed as input (IR < 4): an overridable default. Keep as constant.
            continue
        define(vi.name, "a graph input")
        v = Value(vi.name)
        read_type(v, vi.type)
        g.add_input(v)
        scope[vi.name] = v
    infos = {vi.name: vi for vi in list(gp.value_info) + list(gp.output)}
    # Two passes, so that a node may read a value defined further down the list: ONNX asks
    # for sorted nodes, but onnxruntime runs unsorted graphs, and so does pyge
    # (model_from_proto sorts them).
    nodes = []
    taken = {n.name for n in g.nodes}
    for i, np_ in enumerate(gp.node):
        # ONNX does not require unique node names; pyge's graphs have them (the second of two
        # nodes called X becomes X_1; none is added yet, so the names taken are kept here).
        name = unique_name(taken, np_.name or f"{np_.op_type}_{i}")
        node = Node(np_.op_type, name, domain=np_.domain)
        node.doc = np_.doc_string
        for oname in np_.output:
            if oname:
                define(oname, f"node {name!r}")
            v = node.add_output(Value(oname if oname else f"{name}__unused{len(node.outputs)}"))
            if oname:
                scope[oname] = v
        nodes.append(node)
    for node, np_ in zip(nodes, gp.node):
        _read_node(node, np_, scope, g.opset_imports)
        for oname, v in zip(np_.output, node.outputs):
            if oname in infos:
                read_type(v, infos[oname].type)
        g.add_node(node)
    for vo in gp.output:
        v = scope.get(vo.name)
        if v is None:
            raise ModelLoadError(f"graph output {vo.name!r} is not defined by any node or input")
        if v.dtype is None and v.shape is None:
            read_type(v, vo.type)
        g.outputs.append(v)
    _dedupe_node_names(g)
    return g


def _read_node(node: Node, np_: onnx.NodeProto, scope: dict[str, Value], opsets: dict[str, int]) -> None:
    """`node`'s attributes and inputs from its proto; `scope` holds every name it may read."""
    name = node.name
    for a in np_.attribute:
        if a.ref_attr_name:
            raise ModelLoadError(f"node {name!r}: attribute references (functions) are not supported")
        try:
            node.attrs[a.name] = _attr_value(a, scope, opsets)
        except ModelLoadError as err:
            raise ModelLoadError(f"node {name!r} ({np_.op_type}): {err}") from err
        except GraphError:
            raise
        except Exception as err:  # noqa: BLE001 - a corrupt tensor attribute (dtype, data size)
            raise ModelLoadError(f"node {name!r} ({np_.op_type}): attribute {a.name!r} cannot be read: "
                                 f"{type(err).__name__}: {err}") from err
    for iname in np_.input:
        if iname == "":
            node.append_input(None)
            continue
        v = scope.get(iname)
        if v is None:
            raise ModelLoadError(f"node {name!r} ({np_.op_type}) reads {iname!r}, which nothing defines")
        node.append_input(v)


def _dedupe_node_names(g: Graph) -> None:
    seen: set[str] = set()
    for n in g.nodes:
        n.name = unique_name(seen, n.name)


def _sparse_to_dense(sp: onnx.SparseTensorProto) -> np.ndarray:
    values = _array(sp.values)
    idx = _array(sp.indices)
    dims = tuple(sp.dims)
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    if idx.ndim == 1:
        dense[idx] = values
    else:
        dense[np.ravel_multi_index(idx.T, dims)] = values
    return dense.reshape(dims)


def model_from_proto(mp: onnx.ModelProto, sort: bool = True) -> Graph:
    """The model's graph; with `sort`, every (sub)graph in a topological order, a cycle being
    a ModelGraphCycleError that names its nodes. Without it nodes stay in the file's order
    (for a reader that matches records to nodes by position, then sorts: modelfile.py)."""
    opsets = {op.domain if op.domain not in ("ai.onnx",) else "": op.version for op in mp.opset_import}
    if "" not in opsets:
        opsets[""] = 1
    if mp.functions:
        names = ", ".join(f.name for f in mp.functions)
        raise ModelLoadError(f"model-local functions are not supported: {names}")
    g = graph_from_proto(mp.graph, opsets=opsets)
    g.ir_version = mp.ir_version
    g.metadata = {p.key: p.value for p in mp.metadata_props}
    if sort:
        sort_graphs(g)
    return g


def sort_graphs(g: Graph) -> None:
    """Sort `g` and every subgraph topologically; a cycle is a ModelGraphCycleError."""
    try:
        for sg in g.all_graphs():
            sg.sort()
    except GraphCycleError as err:
        raise ModelGraphCycleError(str(err), err.nodes) from None


# ---------------------------------------------------------------------------------------
# IR -> proto


def _attr_proto(name: str, value: Any, weights: bool) -> AttributeProto:
    if isinstance(value, Graph):
        return helper.make_attribute(name, graph_to_proto(value, weights=weights))
    if isinstance(value, list) and value and isinstance(value[0], Graph):
        return helper.make_attribute(name, [graph_to_proto(x, weights=weights) for x in value])
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, _tensor_proto("", value, weights) if weights == "shapes"
                                     else numpy_helper.from_array(value))
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(name, [numpy_helper.from_array(x) for x in value])
    if isinstance(value, onnx.TypeProto):
        a = AttributeProto()
        a.name = name
        a.type = AttributeProto.TYPE_PROTO
        a.tp.CopyFrom(value)
        return a
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, np.floating):
        value = float(value)
    return helper.make_attribute(name, value)


# weights="shapes" (for shape inference): data is kept only for tensors that can feed a shape
# computation (data propagation reads Reshape targets, Slice bounds and the like); other
# tensors keep name, type and dims, which is all inference needs of them.
SHAPE_DATA_MAX = 4096


def keeps_shape_data(dtype: np.dtype, size: int) -> bool:
    return size <= SHAPE_DATA_MAX or (np.dtype(dtype).kind in "iu" and size <= 16 * SHAPE_DATA_MAX)


def _tensor_proto(name: str, arr: np.ndarray, weights: bool | str) -> TensorProto:
    tp = TensorProto()
    _fill_tensor(tp, name, arr, weights)
    return tp


def _fill_tensor(tp: TensorProto, name: str, arr: np.ndarray, weights: bool | str) -> None:
    """Write initializer `name` = `arr` into the empty `tp` (graph_to_proto writes each
    initializer in place, as it does nodes, rather than making it and copying it in)."""
    if weights == "shapes" and arr.dtype != object and not keeps_shape_data(arr.dtype, arr.size):
        tp.name = name
        tp.data_type = dtype_to_onnx(str(arr.dtype))
        tp.dims.extend(arr.shape)
        return
    if not weights:
        # Structure-only dumps: keep name, type and shape, drop the data.
        tp.name = name
        tp.data_type = dtype_to_onnx(str(arr.dtype))
        tp.dims.extend(arr.shape)
        tp.data_location = TensorProto.EXTERNAL
        e = tp.external_data.add()
        e.key, e.value = "location", "(omitted)"
        return
    if arr.dtype == object:
        tp.CopyFrom(helper.make_tensor(name, TensorProto.STRING, arr.shape,
                                       [s.encode() if isinstance(s, str) else s for s in arr.ravel()]))
    elif not fill_raw_tensor(tp, name, arr):
        tp.CopyFrom(numpy_helper.from_array(arr, name))


def node_to_proto(n: Node, weights: bool = True, extra_attrs: dict | None = None) -> onnx.NodeProto:
    np_ = onnx.NodeProto()
    _fill_node(np_, n, weights, extra_attrs)
    return np_


def _fill_node(np_: onnx.NodeProto, n: Node, weights, extra_attrs: dict | None) -> None:
    """Write `n` into the empty `np_`: the fields onnx.helper.make_node would set, in its
    order, without its call overhead (graph_to_proto writes every node of a graph so)."""
    np_.op_type = n.op_type
    np_.input.extend([v.name if v is not None else "" for v in n._inputs])
    np_.output.extend([o.name for o in n._outputs])
    if n.name:
        np_.name = n.name
    if n.domain:
        np_.domain = n.domain
    if n.attrs:
        attributes = np_.attribute
        for k in sorted(n.attrs):
            if not add_attribute(attributes, k, n.attrs[k]):
                attributes.append(_attr_proto(k, n.attrs[k], weights))
    for k, v in (extra_attrs or {}).items():
        np_.attribute.append(_attr_proto(k, v, weights))
    if n.doc:
        np_.doc_string = n.doc


def graph_to_proto(g: Graph, weights: bool = True, node_hook=None,
                   extra_nodes: list[onnx.NodeProto] | None = None,
                   into: onnx.GraphProto | None = None) -> onnx.GraphProto:
    """Convert a graph; `node_hook(node) -> dict` adds attributes (e.g. `_stream_id`).
    The fields are those onnx.helper.make_graph sets, in its order; nodes and initializers
    are written in place rather than made and then copied in, into `into` (an empty
    GraphProto, such as a new model's graph field) when given."""
    gp = onnx.GraphProto() if into is None else into
    if extra_nodes is not None:
        gp.node.extend(extra_nodes)  # the caller supplies the whole node list (e.g. the built graph)
    else:
        for n in g._nodes:
            _fill_node(gp.node.add(), n, weights, node_hook(n) if node_hook else None)
    outputs = {id(v) for v in g.outputs}
    vinfo = [value_info(o) for n in g._nodes for o in n._outputs
             if (o.dtype is not None or o.shape is not None) and id(o) not in outputs]
    gp.name = g.name
    gp.input.extend([value_info(v) for v in g.inputs])
    gp.output.extend([value_info(v) for v in g.outputs])
    add = gp.initializer.add
    for name, v in g.initializers.items():
        _fill_tensor(add(), name, v.const, weights)
    gp.value_info.extend(vinfo)
    if g.doc:
        gp.doc_string = g.doc
    return gp


def graph_to_model(g: Graph, weights: bool = True, node_hook=None,
                   nodes: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    """The model onnx.helper.make_model(graph_to_proto(g, ...)) would give, with the graph
    written into the model's own field (make_model copies a graph in: a whole second copy
    of a large model, on every compile's type inference)."""
    mp = onnx.ModelProto()
    mp.ir_version = onnx.IR_VERSION          # make_model's order: touched first
    graph_to_proto(g, weights=weights, node_hook=node_hook, extra_nodes=nodes, into=mp.graph)
    mp.opset_import.extend([helper.make_opsetid(d, v) for d, v in sorted(g.opset_imports.items())])
    mp.producer_name = "pyge"
    mp.ir_version = max(g.ir_version, 3) if g.ir_version else 8
    for k, v in g.metadata.items():
        p = mp.metadata_props.add()
        p.key, p.value = k, v
    return mp
