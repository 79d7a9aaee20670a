"""Property tests (issue 20): random truncations and bit flips of a .pgm file give only
ModelFileError, never another exception, a crash or a hang; a file that still loads (bits
flipped and the checksum recomputed, as anyone can) verifies and runs like its source, or
fails with a pyge error."""
from __future__ import annotations

import hashlib
import signal
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyge
from pyge.builtin_models import inception_block, random_inputs
from pyge.errors import ModelFileError, PygeError
from pyge.model import load_model

PARALLEL = {"ge.streamMaxParallelNum": "4", "pyge.streamAllocation": "nodes"}
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextmanager
def time_limit(seconds: int = 10):
    """Fail instead of hanging (SIGALRM: the main thread, on POSIX)."""
    def fire(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(compiled model, its .pgm bytes, feeds, outputs): multi-stream, with events."""
    model = pyge.compile(inception_block(channels=8, size=8), options=PARALLEL)
    assert model.events
    path = tmp_path_factory.mktemp("fuzz") / "src.pgm"
    model.save(path)
    feeds = random_inputs(model.graph, seed=0)
    return model, path.read_bytes(), feeds, model.run(feeds)


def _flip(data: bytes, bits) -> bytes:
    out = bytearray(data)
    for b in bits:
        out[b // 8] ^= 1 << (b % 8)
    return bytes(out)


def _rechecksum(data: bytes) -> bytes:
    return data[:-32] + hashlib.sha256(data[:-32]).digest()


def _body_span(data: bytes) -> tuple[int, int]:
    """[start, end) of the graph section (after the header and its length field)."""
    head_len = int.from_bytes(data[12:20], "little")
    return 28 + head_len, len(data) - 32


def _load(tmp_path, data: bytes):
    p = tmp_path / "fuzz.pgm"
    p.write_bytes(data)
    with time_limit():
        return load_model(p)


@SETTINGS
@given(data=st.data())
def test_truncated_file_is_a_model_file_error(source, tmp_path, data):
    full = source[1]
    keep = data.draw(st.integers(0, len(full) - 1))
    with pytest.raises(ModelFileError):
        _load(tmp_path, full[:keep])


@SETTINGS
@given(data=st.data())
def test_flipped_bits_are_a_model_file_error(source, tmp_path, data):
    full = source[1]
    bits = data.draw(st.sets(st.integers(0, 8 * len(full) - 1), min_size=1, max_size=4))
    with pytest.raises(ModelFileError):
        _load(tmp_path, _flip(full, bits))


def _loads_like_source(source, tmp_path, data: bytes, same_numbers: bool) -> None:
    model, _, feeds, want = source
    try:
        loaded = _load(tmp_path, data)
    except ModelFileError:
        return
    with time_limit():
        loaded.verify()
        try:
            got = loaded.run(feeds)
        except PygeError:
            assert not same_numbers, "a plan-only change made the model fail"
            return
    assert got.keys() == want.keys()
    if same_numbers:
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@SETTINGS
@given(data=st.data())
def test_header_bits_flipped_with_a_new_checksum(source, tmp_path, data):
    """The header holds the plan: a changed plan that still loads is one that verifies
    against its graph, so it computes what the source computes."""
    full = source[1]
    start, _ = _body_span(full)
    bits = data.draw(st.sets(st.integers(8 * 8, 8 * start - 1), min_size=1, max_size=3))
    _loads_like_source(source, tmp_path, _rechecksum(_flip(full, bits)), same_numbers=True)


@SETTINGS
@given(data=st.data())
def test_graph_bits_flipped_with_a_new_checksum(source, tmp_path, data):
    """The graph section holds the ONNX graph and its weights: a flipped weight changes the
    numbers, anything else must load and run or fail with a pyge error."""
    full = source[1]
    start, end = _body_span(full)
    bits = data.draw(st.sets(st.integers(8 * start, 8 * end - 1), min_size=1, max_size=3))
    _loads_like_source(source, tmp_path, _rechecksum(_flip(full, bits)), same_numbers=False)


def test_a_node_name_that_is_not_utf8_is_a_model_file_error(source, tmp_path):
    """Found by the fuzzing above: it ran into a TypeError at run time."""
    model, full, _, _ = source
    name = model.graph.nodes[0].name.encode()
    start, end = _body_span(full)
    body = full[start:end].replace(name, b"\xff" + name[1:], 1)
    assert body != full[start:end]
    with pytest.raises(ModelFileError, match="not valid UTF-8"):
        _load(tmp_path, _rechecksum(full[:start] + body + full[end:]))
