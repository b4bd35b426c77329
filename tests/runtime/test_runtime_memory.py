"""Buffers through the binding: numpy round trips for every dtype, strided
regions, padding, both out-of-bounds policies and both fill modes."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mosaic_rt import Runtime

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    ml_dtypes.bfloat16,
    np.float32,
    np.float64,
]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture
def rt():
    return Runtime(2, 2, wait_timeout=10)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("space", ["vmem", "smem", "hbm", "any", 0, 5])
def test_round_trip_every_dtype(rt, dtype, space):
    x = sample((3, 5), dtype)
    buf = rt.allocate_buffer(1, 1, space, x)
    y = rt.load(1, 1, space, buf)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    info = rt.buffer_info(1, 1, space, buf)
    assert (info.dtype, info.shape, info.logical_shape) == (x.dtype, (3, 5), (3, 5))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_store_and_swap_every_dtype(rt, dtype):
    x, z = sample((4, 4), dtype, 1), sample((2, 4), dtype, 2)
    buf = rt.allocate_buffer(0, 0, "vmem", x)
    rt.store(0, 0, "vmem", buf, z, [(1, 2)])
    expect = x.copy()
    expect[1:3] = z
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), expect)
    old = rt.swap(0, 0, "vmem", buf, x[0], [3])
    np.testing.assert_array_equal(old, expect[3])
    expect[3] = x[0]
    np.testing.assert_array_equal(rt.buffer_content(0, 0, "vmem", buf), expect)


@st.composite
def strided_case(draw):
    shape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    region, index = [], []
    for dim in shape[: draw(st.integers(0, len(shape)))]:
        if draw(st.booleans()):
            i = draw(st.integers(0, dim - 1))
            region.append(i)
            index.append(i)
        else:
            stride = draw(st.integers(1, 3))
            start = draw(st.integers(0, dim - 1))
            size = draw(st.integers(0, (dim - 1 - start) // stride + 1))
            region.append((start, size, stride))
            index.append(slice(start, start + size * stride, stride) if size else slice(0, 0))
    dtype = draw(st.sampled_from(DTYPES))
    return shape, region, tuple(index), dtype


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided_case())
def test_strided_regions_match_numpy(case):
    shape, region, index, dtype = case
    rt = Runtime(1, 1, wait_timeout=10)
    x = sample(shape, dtype, 3)
    buf = rt.allocate_buffer(0, 0, "vmem", x)
    got = rt.load(0, 0, "vmem", buf, region)
    np.testing.assert_array_equal(got, x[index])
    # Store the complement values back through the same region.
    new = sample(x[index].shape, dtype, 4)
    rt.store(0, 0, "vmem", buf, new, region)
    x[index] = new
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), x)


def test_non_contiguous_input_and_broadcast_scalar(rt):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    buf = rt.allocate_buffer(0, 0, "vmem", x[:, ::2])  # copied to contiguous
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), x[:, ::2])
    rt.store(0, 0, "vmem", buf, 1.5, [(0, 2)])  # scalar broadcast
    assert (rt.load(0, 0, "vmem", buf, [(0, 2)]) == 1.5).all()


def test_swap_with_mask(rt):
    buf = rt.allocate_buffer(0, 0, "vmem", np.arange(4, dtype=np.int32))
    new = np.full(4, -1, np.int32)
    old = rt.swap(0, 0, "vmem", buf, new, mask=[True, False, True, False])
    np.testing.assert_array_equal(old, [0, -1, 2, -1])  # masked-off: the new values
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), [-1, 1, -1, 3])


@pytest.mark.parametrize("mode, expect", [("nan", np.nan), ("zero", 0.0)])
def test_fill_modes_float(mode, expect):
    rt = Runtime(1, 1, uninitialized_memory=mode)
    buf = rt.allocate_buffer(0, 0, "vmem", shape=(2, 3), dtype=np.float32)
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), np.full((2, 3), expect, np.float32))
    bf = rt.allocate_buffer(0, 0, "vmem", shape=(2,), dtype=ml_dtypes.bfloat16)
    got = rt.load(0, 0, "vmem", bf).astype(np.float32)
    assert np.isnan(got).all() if mode == "nan" else (got == 0).all()


@pytest.mark.parametrize("mode", ["nan", "zero"])
def test_fill_modes_int_and_bool(mode):
    rt = Runtime(1, 1, uninitialized_memory=mode)
    i = rt.allocate_buffer(0, 0, "smem", shape=(3,), dtype=np.int16)
    b = rt.allocate_buffer(0, 0, "smem", shape=(3,), dtype=bool)
    want_i = np.iinfo(np.int16).max if mode == "nan" else 0
    assert (rt.load(0, 0, "smem", i) == want_i).all()
    assert (rt.load(0, 0, "smem", b) == (mode == "nan")).all()


def test_padded_buffer(rt):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = rt.allocate_buffer(0, 0, "vmem", x, padded_shape=(4, 4))
    info = rt.buffer_info(0, 0, "vmem", buf)
    assert (info.shape, info.logical_shape) == ((4, 4), (2, 3))
    content = rt.buffer_content(0, 0, "vmem", buf)
    np.testing.assert_array_equal(content[:2, :3], x)
    assert np.isnan(content[2:]).all() and np.isnan(content[:, 3]).all()


def test_out_of_bounds_read_raises_index_error(rt):
    buf = rt.allocate_buffer(0, 0, "vmem", np.zeros((4, 4), np.float32))
    with pytest.raises(IndexError, match="Out-of-bounds read"):
        rt.load(0, 0, "vmem", buf, [(2, 4)])
    with pytest.raises(IndexError):
        rt.load(0, 0, "vmem", buf, [7])
    # Out-of-bounds writes are ValueErrors, as in stock interpret mode.
    with pytest.raises(ValueError, match="Out-of-bounds write"):
        rt.store(0, 0, "vmem", buf, np.zeros((4, 4), np.float32), [(2, 4)])


def test_out_of_bounds_read_uninitialized_policy():
    rt = Runtime(1, 1, out_of_bounds_reads="uninitialized")
    buf = rt.allocate_buffer(0, 0, "vmem", np.arange(4, dtype=np.float32))
    got = rt.load(0, 0, "vmem", buf, [(2, 4)])
    np.testing.assert_array_equal(got[:2], [2, 3])
    assert np.isnan(got[2:]).all()
    with pytest.raises(ValueError, match="Out-of-bounds write"):  # writes still fail
        rt.store(0, 0, "vmem", buf, np.zeros(4, np.float32), [(2, 4)])


def test_free_and_ids(rt):
    a = rt.allocate_buffer(0, None, "vmem", shape=(2,), dtype=np.int32)
    b = rt.allocate_buffer(0, 1, "vmem", shape=(2,), dtype=np.int32)
    assert a == 100 and b == 101
    rt.free_buffer(0, 0, "vmem", a)
    with pytest.raises(ValueError):
        rt.load(0, 0, "vmem", a)
    np.testing.assert_array_equal(rt.load(0, 1, "vmem", a).shape, (2,))


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda rt, b: rt.load(5, 0, "vmem", b), ValueError),  # no such device
        (lambda rt, b: rt.load(0, 9, "vmem", b), ValueError),  # no such core
        (lambda rt, b: rt.load(-1, 0, "vmem", b), ValueError),  # negative id
        (lambda rt, b: rt.load(0, 0, "vmem", 2**40), ValueError),  # huge id
        (lambda rt, b: rt.load(0, 0, "vmem", 999), ValueError),  # unknown buffer
        (lambda rt, b: rt.load(0, 0, "hbm", b), ValueError),  # wrong space
        (lambda rt, b: rt.load(0, 0, "l2", b), ValueError),  # unknown space
        (lambda rt, b: rt.load(0, 0, 99, b), ValueError),  # unknown space code
        (lambda rt, b: rt.load(0, 0, "vmem", b, [(0, 2, 0)]), ValueError),  # zero stride
        (lambda rt, b: rt.load(0, 0, "vmem", b, [(-1, 2)]), ValueError),  # negative start
        (lambda rt, b: rt.load(0, 0, "vmem", b, [(0, 2**80)]), ValueError),  # huge size
        (lambda rt, b: rt.load(0, 0, "vmem", b, [0, 0, 0]), ValueError),  # too many dims
        (lambda rt, b: rt.load(0, 0, "vmem", b, [(0, 1, 1, 1)]), ValueError),
        (lambda rt, b: rt.load(0, 0, "vmem", b, "0:2"), TypeError),
        (lambda rt, b: rt.load(0, 0, "vmem", b, [1.5]), TypeError),
        (lambda rt, b: rt.store(0, 0, "vmem", b, np.zeros((4, 4), np.int32)), ValueError),  # dtype
        (lambda rt, b: rt.store(0, 0, "vmem", b, np.zeros((3, 4), np.float32)), ValueError),  # shape
        (lambda rt, b: rt.store(0, 0, "vmem", b, "text"), ValueError),
        (lambda rt, b: rt.allocate_buffer(0, 0, "vmem", np.zeros(2, ml_dtypes.float6_e2m3fn)), ValueError),
        (lambda rt, b: rt.allocate_buffer(0, 0, "vmem", shape=(-1,), dtype=np.float32), ValueError),
        (lambda rt, b: rt.allocate_buffer(0, 0, "vmem", shape=(2**62, 2**62), dtype=np.float32), ValueError),
        (lambda rt, b: rt.allocate_buffer(0, 0, "vmem", np.zeros(4, np.float32), padded_shape=(2,)), ValueError),
        (lambda rt, b: rt.free_buffer(0, 0, "vmem", 12345), ValueError),
    ],
)
def test_bad_memory_input_raises_and_keeps_runtime_usable(rt, call, exc):
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    buf = rt.allocate_buffer(0, 0, "vmem", x)
    with pytest.raises(exc):
        call(rt, buf)
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), x)
    assert rt.failure() is None


def test_native_layer_checks_raw_buffers(rt):
    native = rt.native
    buf = rt.allocate_buffer(0, 0, "vmem", np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="needs 16 bytes"):
        native.load(0, 0, "vmem", buf, None, np.empty(3, np.float32))
    with pytest.raises(ValueError, match="writable"):
        native.load(0, 0, "vmem", buf, None, b"0123456789abcdef")
    with pytest.raises(ValueError, match="C-contiguous"):
        native.store(0, 0, "vmem", buf, None, np.zeros(8, np.float32)[::2])
    with pytest.raises(TypeError, match="buffer protocol"):
        native.store(0, 0, "vmem", buf, None, [0.0] * 4)
    both = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="share memory"):
        native.swap(0, 0, "vmem", buf, None, both, both)
