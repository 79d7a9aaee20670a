"""TensorFlow frozen graphs (.pb) through tf2onnx: the optional extra `pyge[tf]`.

Skipped where TensorFlow or tf2onnx is not installed (the default development set-up);
run with both installed to check the .pb path.
"""
from __future__ import annotations

import numpy as np
import pytest

from pyge import cli

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf2onnx")


@pytest.fixture(scope="module")
def pb_file(tmp_path_factory):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 10

    @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
    def f(x):
        return tf.nn.relu(tf.matmul(x, tf.constant(w))) + tf.abs(x[:, :4])

    frozen = convert_variables_to_constants_v2(f.get_concrete_function())
    folder = tmp_path_factory.mktemp("tf")
    tf.io.write_graph(frozen.graph.as_graph_def(), str(folder), "tiny.pb", as_text=False)
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    np.save(folder / "x.npy", x)
    return folder / "tiny.pb", x, f(tf.constant(x)).numpy()


def test_run_pb_matches_tensorflow(pb_file, tmp_path, capsys):
    path, x, want = pb_file
    code = cli.main(["run", str(path), "-i", str(path.parent / "x.npy"), "--save-outputs", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (out,) = list(tmp_path.glob("*.npy"))
    np.testing.assert_allclose(np.load(out), want, rtol=1e-5, atol=1e-6)


def test_compile_pb_to_pgm(pb_file, tmp_path, capsys):
    path, _, _ = pb_file
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "tiny.pgm")]) == 0
    assert (tmp_path / "tiny.pgm").exists()


def test_not_a_graphdef(tmp_path, capsys):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff garbage")
    assert cli.main(["run", str(bad)]) == 1
    assert "bad.pb" in capsys.readouterr().err
