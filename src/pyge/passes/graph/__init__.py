"""Graph passes: they run once per compilation, on the compiler's copy of the graph.

One pass per file (the order is stated in pyge/compiler.py, GRAPH_PASSES): check_ops,
infer_types, fold_constants, the fusions fuse_dropout (inference Dropouts removed),
fuse_conv_bn, fuse_conv_act, fuse_affine, fuse_shuffle, place_shuffle (a shuffle into a
grouped convolution's weights or below a strided depthwise convolution), fuse_concat_relu
(a Relu after a Concat taken by its parts), pool_concat (a pool of a Concat run on the
parts) and fuse_attention (their shared matching helpers in _match.py), and engines
(assign_engines and the engine table).
"""
