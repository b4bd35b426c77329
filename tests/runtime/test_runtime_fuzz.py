"""Random (mostly bad) calls into the native runtime: every one either works
or raises a clear error of an expected type -- never a panic, a crash or a
corrupted runtime."""

import re
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mosaic_rt import MosaicRuntimeError, Runtime, WaitTimeout

EXPECTED = (ValueError, IndexError, TypeError, NotImplementedError, MosaicRuntimeError)

ints = st.one_of(
    st.integers(-3, 3),
    st.integers(99, 102),
    st.integers(1999, 2002),
    st.sampled_from([-(2**63), 2**32, 2**63 - 1, 2**64, 2**100]),
)
entries = st.one_of(
    ints, st.tuples(ints, ints), st.tuples(ints, ints, ints), st.tuples(ints), st.just(1.5), st.just("x")
)
regions = st.one_of(st.none(), st.lists(entries, max_size=4), st.just("0:2"))
spaces = st.one_of(st.sampled_from(["vmem", "smem", "hbm", "any", "bogus", ""]), ints)
dtypes = st.sampled_from(["float32", "int8", "bool", "bfloat16", "complex64", "int4", ""])
shapes = st.lists(ints, max_size=3)
raw_buffers = st.one_of(st.integers(0, 64).map(bytearray), st.binary(max_size=64), st.just([1, 2]), st.none())


def calls():
    n = st.none()
    return st.one_of(
        st.tuples(st.just("allocate_buffer"), ints, st.one_of(n, ints), spaces, dtypes, shapes),
        st.tuples(st.just("free_buffer"), ints, ints, spaces, ints),
        st.tuples(st.just("region_layout"), ints, ints, spaces, ints, regions),
        st.tuples(st.just("buffer_info"), ints, ints, spaces, ints),
        st.tuples(st.just("load"), ints, ints, spaces, ints, regions, raw_buffers),
        st.tuples(st.just("store"), ints, ints, spaces, ints, regions, raw_buffers),
        st.tuples(
            st.just("swap"), ints, ints, spaces, ints, regions, raw_buffers, raw_buffers, st.one_of(n, raw_buffers)
        ),
        st.tuples(
            st.just("allocate_semaphores"),
            ints,
            st.one_of(n, ints),
            st.sampled_from(["regular", "dma", "barrier", "other"]),
            ints,
        ),
        st.tuples(st.just("barrier_semaphore"), ints, ints),
        st.tuples(st.just("signal"), ints, ints, ints, ints, st.one_of(n, ints), st.one_of(n, ints)),
        st.tuples(st.just("read"), ints, ints, ints),
        st.tuples(st.just("wait"), ints, ints, ints, st.integers(-2, 2)),
        st.tuples(
            st.just("dma_start"),
            ints,
            ints,
            spaces,
            ints,
            regions,
            spaces,
            ints,
            regions,
            ints,
            st.one_of(n, ints),
            st.one_of(n, ints),
        ),
        st.tuples(st.just("leaks"), st.one_of(n, ints)),
        st.tuples(st.just("dma_wait"), ints, ints, ints, st.integers(-2, 2)),
        st.tuples(st.just("device_barrier"), ints),
        st.tuples(st.just("buffer_content"), ints, ints, spaces, ints),
        st.tuples(
            st.just("region_layout"),
            ints,
            ints,
            spaces,
            ints,
            regions,
            st.sampled_from([None, "read", "write", "swap", "bogus"]),
        ),
        st.tuples(st.just("semaphore_pages_in_use")),
        st.tuples(st.just("failure")),
    )


def fresh_semaphore(rt):
    """A new semaphore on (1, 1), skipping ids the fuzzed calls took as
    barrier (fixed) ids: those collisions are reported, by design."""
    for _ in range(8):
        try:
            return rt.allocate_semaphores(1, 1)
        except ValueError as e:
            assert "occurs as both fixed-id and internal" in str(e)
    raise AssertionError("no free semaphore id")


@pytest.mark.timeout(240)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(calls(), min_size=1, max_size=25))
def test_random_calls_never_crash_or_corrupt(sequence):
    rt = Runtime(2, 2, wait_timeout=0.01)
    native = rt.native
    for name, *args in sequence:
        try:
            getattr(native, name)(*args)
        except EXPECTED:
            pass
        except BaseException as e:  # e.g. pyo3's PanicException: never allowed
            raise AssertionError(f"{name}{tuple(args)} raised {type(e).__name__}: {e}") from e
    # Still fully usable: a fresh buffer round-trips and semaphores count.
    assert rt.failure() is None
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = rt.allocate_buffer(1, 1, "vmem", x)
    np.testing.assert_array_equal(rt.load(1, 1, "vmem", buf), x)
    sem = fresh_semaphore(rt)
    rt.signal(1, 1, sem, 2, target_core=1)
    rt.wait(1, 1, sem, 2)
    assert rt.read(1, 1, sem) == 0


# ----------------------------------------------- bad values, each named


def _rt():
    rt = Runtime(2, 2, wait_timeout=0.01)
    buf = rt.allocate_buffer(0, 0, "vmem", np.arange(8, dtype=np.float32))
    sem = rt.allocate_semaphores(0)
    return rt, buf, sem


BAD_DEVICES = [-1, 2, 99, 2**31, 2**40, -(2**63)]
BAD_CORES = [-1, 2, 7, 2**33]

# (entry point, how to call it with a device id, with a core id)
DEVICE_CORE_CALLS = {
    "allocate_buffer": (lambda rt, b, s, d, c: rt.allocate_buffer(d, c, "vmem", np.zeros(2))),
    "allocate_semaphores": (lambda rt, b, s, d, c: rt.allocate_semaphores(d, c)),
    "free_buffer": (lambda rt, b, s, d, c: rt.free_buffer(d, c, "vmem", b)),
    "buffer_info": (lambda rt, b, s, d, c: rt.buffer_info(d, c, "vmem", b)),
    "buffer_content": (lambda rt, b, s, d, c: rt.buffer_content(d, c, "vmem", b)),
    "load": (lambda rt, b, s, d, c: rt.load(d, c, "vmem", b)),
    "store": (lambda rt, b, s, d, c: rt.store(d, c, "vmem", b, 1.0)),
    "swap": (lambda rt, b, s, d, c: rt.swap(d, c, "vmem", b, 1.0)),
    "signal": (lambda rt, b, s, d, c: rt.signal(d, c, s)),
    "signal target": (lambda rt, b, s, d, c: rt.signal(0, 0, s, target_device=d, target_core=c)),
    "wait": (lambda rt, b, s, d, c: rt.wait(d, c, s)),
    "dma_wait": (lambda rt, b, s, d, c: rt.dma_wait(d, c, s, 4)),
    "read": (lambda rt, b, s, d, c: rt.read(d, c, s)),
    "dma_start": (lambda rt, b, s, d, c: rt.dma_start(d, c, ("vmem", b), ("vmem", b), s)),
    "dma_start remote": (
        lambda rt, b, s, d, c: rt.dma_start(0, c, ("vmem", b), ("vmem", b), s, src_sem=s, dst_device=d)
    ),
    "fail": (lambda rt, b, s, d, c: rt.fail("boom", d, c)),
}
DEVICE_CALLS = {
    "barrier_semaphore": (lambda rt, d: rt.barrier_semaphore(d, 1)),
    "device_barrier": (lambda rt, d: rt.device_barrier(d)),
    "leaks": (lambda rt, d: rt.leaks(d)),
}


@pytest.mark.parametrize("name", sorted(DEVICE_CORE_CALLS))
@pytest.mark.parametrize("device", BAD_DEVICES)
def test_bad_device_ids_are_value_errors_naming_the_id_and_the_range(name, device):
    rt, buf, sem = _rt()
    with pytest.raises(ValueError) as info:
        DEVICE_CORE_CALLS[name](rt, buf, sem, device, 0)
    msg = str(info.value)
    assert str(device) in msg, msg
    if -(2**63) <= device < 2**63:
        assert "valid ids 0 to 1" in msg, msg
    assert rt.failure() is None


@pytest.mark.parametrize("name", sorted(DEVICE_CORE_CALLS))
@pytest.mark.parametrize("core", BAD_CORES)
def test_bad_core_ids_are_value_errors_naming_the_id_and_the_range(name, core):
    rt, buf, sem = _rt()
    with pytest.raises(ValueError, match=rf"core id {core} out of range: .*valid ids 0 to 1"):
        DEVICE_CORE_CALLS[name](rt, buf, sem, 0, core)
    assert rt.failure() is None


@pytest.mark.parametrize("name", sorted(DEVICE_CALLS))
@pytest.mark.parametrize("device", BAD_DEVICES)
def test_device_only_entry_points_check_the_id(name, device):
    rt, _, _ = _rt()
    with pytest.raises(ValueError, match=rf"device id {device} out of range"):
        DEVICE_CALLS[name](rt, device)


@pytest.mark.parametrize("value", [2**64, 2**100, -(2**64)])
def test_ids_beyond_64_bits_are_value_errors_naming_the_value(value):
    rt, buf, sem = _rt()
    for call in (
        lambda: rt.signal(value, 0, sem),
        lambda: rt.read(0, 0, value),
        lambda: rt.load(0, value, "vmem", buf),
        lambda: rt.signal(0, 0, sem, value),
    ):
        with pytest.raises(ValueError, match=str(value)):
            call()


@pytest.mark.parametrize("sem_id", [-1, 0, 1999, 2001, 2**31, 2**32 - 1, 2**32])
def test_bad_semaphore_ids_are_value_errors_naming_the_id(sem_id):
    rt, _, _ = _rt()
    for call in (
        lambda: rt.signal(0, 0, sem_id),
        lambda: rt.wait(0, 0, sem_id),
        lambda: rt.read(0, 0, sem_id),
        lambda: rt.dma_wait(0, 0, sem_id, 4),
    ):
        with pytest.raises(ValueError, match=str(sem_id)):
            call()


@pytest.mark.parametrize("count", [-1, 2**31, 2**32, 2**40])
def test_bad_semaphore_counts_are_value_errors_naming_the_count(count):
    rt, _, _ = _rt()
    with pytest.raises(ValueError, match=str(count)):
        rt.allocate_semaphores(0, count=count)


# Regions of an 8-element buffer: (region, error type, text in the message).
BAD_REGIONS = [
    ([(-1, 2)], ValueError, "negative start"),
    ([(0, -2)], ValueError, "negative size"),
    ([(0, 2, 0)], ValueError, "stride below 1"),
    ([(0, 2, -3)], ValueError, "stride below 1"),
    ([(6, 4)], None, "slice(6, 10, 1)"),
    ([(8, 1)], None, "slice(8, 9, 1)"),
    ([(2**40, 1)], None, str(2**40)),
    ([(0, 2**40)], None, str(2**40)),
    ([(0, 2**62, 2)], ValueError, "overflows"),
    ([(0, 2**61, 4)], ValueError, "overflows"),
    ([9], None, "9"),
    ([-3], ValueError, "negative start"),
    ([(0, 2), (0, 1)], ValueError, "has 2 dims but the buffer has rank 1"),
    ([(0, 2**63)], ValueError, str(2**63)),
    ([(0,)], ValueError, "(start, size) or (start, size, stride)"),
    ([(0, 1, 1, 1)], ValueError, "(start, size) or (start, size, stride)"),
    ([1.5], TypeError, "float"),
    ("0:2", TypeError, "str"),
]


@pytest.mark.parametrize("region, exc, text", BAD_REGIONS)
@pytest.mark.parametrize("op", ["load", "store", "swap", "dma_src", "dma_dst"])
def test_bad_regions_give_clear_errors_and_change_nothing(op, region, exc, text):
    # Out of bounds: reads raise IndexError, writes ValueError (as stock).
    want = exc or (IndexError if op in ("load", "dma_src") else ValueError)
    calls = {  # late-bound: rt, buf, dst, sem are the loop's
        "load": lambda: rt.load(0, 0, "vmem", buf, region),
        "store": lambda: rt.store(0, 0, "vmem", buf, 1.0, region),
        "swap": lambda: rt.swap(0, 0, "vmem", buf, 1.0, region),
        "dma_src": lambda: rt.dma_start(0, 0, ("vmem", buf, region), ("vmem", dst, region), sem),
        "dma_dst": lambda: rt.dma_start(0, 0, ("vmem", buf, _same_shape(region)), ("vmem", dst, region), sem),
    }
    if op == "dma_dst" and _same_shape(region) is None:
        pytest.skip("no in-bounds source region of that shape")
    for mode in ("eager", "on_wait"):
        rt = Runtime(1, 1, dma_execution_mode=mode, wait_timeout=0.01)
        buf = rt.allocate_buffer(0, 0, "vmem", np.arange(8, dtype=np.float32))
        dst = rt.allocate_buffer(0, 0, "vmem", np.zeros(8, np.float32))
        sem = rt.allocate_semaphores(0, kind="dma")
        if op.startswith("dma") and mode == "on_wait" and exc is None:
            # Queued DMAs check bounds when they run: at the wait.
            try:
                calls[op]()
            except (ValueError, IndexError) as e:
                assert text in str(e)
                continue
            with pytest.raises((ValueError, IndexError), match=re.escape(text)):
                rt.dma_wait(0, 0, sem, 4)
            continue
        with pytest.raises(want) as info:
            calls[op]()
        assert text in str(info.value), str(info.value)
        np.testing.assert_array_equal(rt.load(0, 0, "vmem", buf), np.arange(8, dtype=np.float32))
        np.testing.assert_array_equal(rt.load(0, 0, "vmem", dst), 0)
        assert rt.read(0, 0, sem) == 0 and rt.failure() is None


def _same_shape(region):
    """An in-bounds source region of an 8-element buffer with the shape of
    `region` (a bad destination), or None."""
    if not isinstance(region, list) or len(region) != 1:
        return None
    (entry,) = region
    if isinstance(entry, int):
        return [0]
    if isinstance(entry, tuple) and len(entry) in (2, 3) and 0 <= entry[1] <= 8:
        return [(0, entry[1])]
    return None


def test_zero_size_regions_are_fine():
    rt, buf, sem = _rt()
    assert rt.load(0, 0, "vmem", buf, [(3, 0)]).shape == (0,)
    rt.store(0, 0, "vmem", buf, np.zeros(0, np.float32), [(3, 0)])
    dst = rt.allocate_buffer(0, 0, "vmem", np.zeros(8, np.float32))
    rt.dma_start(0, 0, ("vmem", buf, [(0, 0)]), ("vmem", dst, [(5, 0)]), sem)
    rt.dma_wait(0, 0, sem, 0)
    assert rt.leaks() == [] or all(lk.count == 0 for lk in rt.leaks())


def test_huge_regions_fail_before_anything_is_allocated():
    rt, buf, _ = _rt()
    before = _rss()
    for region in ([(0, 2**30)], [(0, 2**33)], [(0, 2**40)]):
        with pytest.raises(IndexError):
            rt.load(0, 0, "vmem", buf, region)
        with pytest.raises(IndexError):
            rt.native.load(0, 0, "vmem", buf, region)
        with pytest.raises(ValueError, match="Out-of-bounds write"):
            rt.store(0, 0, "vmem", buf, 1.0, region)
        with pytest.raises(ValueError, match="Out-of-bounds swap"):
            rt.swap(0, 0, "vmem", buf, 1.0, region)
    assert _rss() - before < 64 * 2**20


def _rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def test_dtype_and_shape_mismatches_name_both_sides():
    rt, buf, sem = _rt()
    with pytest.raises(ValueError, match="int32 but the buffer holds float32"):
        rt.store(0, 0, "vmem", buf, np.zeros(8, np.int32))
    with pytest.raises(ValueError, match=r"of shape \(3,\) does not fit a region of shape \(8,\)"):
        rt.store(0, 0, "vmem", buf, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="data has 12 bytes but the region needs 32 bytes"):
        rt.native.store(0, 0, "vmem", buf, None, np.zeros(3, np.float32))
    ints = rt.allocate_buffer(0, 0, "vmem", np.zeros(8, np.int32))
    small = rt.allocate_buffer(0, 0, "vmem", np.zeros(4, np.float32))
    for mode in ("eager", "on_wait"):
        rt2 = Runtime(1, 1, dma_execution_mode=mode)
        a = rt2.allocate_buffer(0, 0, "vmem", np.zeros(8, np.float32))
        b = rt2.allocate_buffer(0, 0, "vmem", np.zeros(8, np.int32))
        c = rt2.allocate_buffer(0, 0, "vmem", np.zeros((2, 4), np.float32))
        s = rt2.allocate_semaphores(0, kind="dma")
        with pytest.raises(ValueError, match=r"float32 \(8,\) .* int32 \(8,\) .* dtypes or shapes differ"):
            rt2.dma_start(0, 0, ("vmem", a), ("vmem", b), s)
        with pytest.raises(ValueError, match=r"float32 \(8,\) .* float32 \(2, 4\) .* dtypes or shapes differ"):
            rt2.dma_start(0, 0, ("vmem", a), ("vmem", c), s)
    del ints, small
    with pytest.raises(ValueError, match="unsupported dtype float6_e2m3fn"):
        rt.allocate_buffer(0, 0, "vmem", np.zeros(2, ml_dtypes.float6_e2m3fn))
    with pytest.raises(ValueError, match="shape dimensions must be >= 0, got -2"):
        rt.allocate_buffer(0, 0, "vmem", shape=(-2,), dtype=np.float32)
    with pytest.raises(ValueError, match=str(2**62)):
        rt.allocate_buffer(0, 0, "vmem", shape=(2**62, 4), dtype=np.float32)
    with pytest.raises((ValueError, MemoryError), match="cannot allocate"):
        rt.allocate_buffer(0, 0, "vmem", shape=(2**50,), dtype=np.float32)


# ---------------------------------------------------------- timeouts


@pytest.mark.parametrize(
    "timeout, exc, text",
    [
        (-1, ValueError, "got -1.0"),
        (-1e-9, ValueError, "got -1e-9"),
        (float("nan"), ValueError, "got NaN"),
        (float("-inf"), ValueError, "got -inf"),
        ("soon", TypeError, "str"),
        ([1], TypeError, "list"),
    ],
)
def test_bad_timeouts_are_clear_errors(timeout, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        Runtime(1, 1, wait_timeout=timeout)


@pytest.mark.parametrize("timeout", [0, 0.0, 1e-9])
def test_tiny_timeouts_time_out_at_once_and_keep_the_runtime_usable(timeout):
    rt = Runtime(2, 1, wait_timeout=timeout)
    sem = rt.allocate_semaphores(0)
    for call in (lambda: rt.wait(0, 0, sem, 1), lambda: rt.dma_wait(0, 0, sem, 4), lambda: rt.device_barrier(0)):
        with pytest.raises(WaitTimeout):
            call()
    rt.signal(0, 0, sem, 1)
    rt.wait(0, 0, sem, 1)
    assert rt.failure() is None


@pytest.mark.parametrize("timeout", [float("inf"), 1e19, 1e300, 2**64, 10**30, 1e15])
def test_huge_timeouts_never_panic(timeout):
    rt = Runtime(2, 1, wait_timeout=timeout)
    assert rt.wait_timeout in (None, float(timeout))
    sem = rt.allocate_semaphores(0)
    rt.signal(1, 0, sem, 1, target_device=0)
    rt.wait(0, 0, sem, 1)
    peer = threading.Thread(target=rt.device_barrier, args=(1,))
    peer.start()
    rt.device_barrier(0)
    peer.join()


# ------------------------------------------------------- constructor


@pytest.mark.parametrize(
    "kwargs, exc, text",
    [
        (dict(num_devices=0), ValueError, "0 x 1"),
        (dict(num_devices=-1), ValueError, "-1"),
        (dict(cores_per_device=2**32), ValueError, str(2**32)),
        (dict(num_devices=2**70), ValueError, str(2**70)),
        (dict(num_devices=70_000), ValueError, "at most 65536"),
        (dict(num_devices=300, cores_per_device=300), ValueError, "at most 65536"),
        (dict(num_devices=1.5), TypeError, "float"),
        (dict(dma_execution_mode="lazy"), ValueError, '"lazy"'),
        (dict(out_of_bounds_reads="ignore"), ValueError, '"ignore"'),
        (dict(uninitialized_memory="random"), ValueError, '"random"'),
    ],
)
def test_bad_constructor_arguments_are_clear_errors(kwargs, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        Runtime(**kwargs)


@settings(max_examples=60, deadline=None)
@given(
    devices=st.one_of(st.integers(-3, 5), st.sampled_from([2**32, 2**64, 70_000])),
    cores=st.one_of(st.integers(-3, 5), st.sampled_from([2**31, 2**63])),
    timeout=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**30)),
)
def test_random_constructor_arguments_build_or_raise_clearly(devices, cores, timeout):
    try:
        rt = Runtime(devices, cores, wait_timeout=timeout)
    except (ValueError, TypeError) as e:
        assert str(e)
        return
    sem = rt.allocate_semaphores(devices - 1)
    rt.signal(devices - 1, cores - 1, sem, 1, target_core=cores - 1)
    rt.wait(devices - 1, cores - 1, sem, 1)
