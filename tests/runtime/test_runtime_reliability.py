"""Runtime limits and checks, through `mosaic_rt.Runtime` and small
`pallas_call`s: remote DMA shape checks in on_wait mode, huge semaphore
arrays, huge timeouts, count overflow, DMAs never waited for and range
checks."""

from __future__ import annotations

import resource
import threading

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt import Runtime

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------- remote DMA shape mismatch


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_remote_dma_with_mismatched_shapes_is_rejected_in_both_modes(mode):
    rt = Runtime(2, 1, dma_execution_mode=mode, wait_timeout=5)
    src = rt.allocate_buffer(0, 0, "vmem", np.ones((8, 128), np.float32))
    dst = rt.allocate_buffer(1, 0, "vmem", shape=(16, 64), dtype=np.float32)
    send = rt.allocate_semaphores(0, kind="dma")
    recv = rt.allocate_semaphores(1, kind="dma")
    with pytest.raises(ValueError, match=r"float32 \(8, 128\) .* float32 \(16, 64\) .* dtypes or shapes differ"):
        rt.dma_start(0, 0, ("vmem", src), ("vmem", dst), recv, src_sem=send, dst_device=1)
    assert rt.leaks() == []
    assert np.isnan(rt.load(1, 0, "vmem", dst)).all()


def _mismatch_messages():
    out = []
    for mode in ("eager", "on_wait"):
        rt = Runtime(2, 1, dma_execution_mode=mode)
        src = rt.allocate_buffer(0, 0, "vmem", np.ones((8, 128), np.float32))
        dst = rt.allocate_buffer(1, 0, "vmem", shape=(16, 64), dtype=np.float32)
        sem = rt.allocate_semaphores(0, kind="dma")
        rt.allocate_semaphores(1, kind="dma")
        try:
            rt.dma_start(0, 0, ("vmem", src), ("vmem", dst), sem, src_sem=sem, dst_device=1)
        except ValueError as e:
            out.append(str(e))
    return out


def test_on_wait_and_eager_report_the_mismatch_with_the_same_text():
    eager, on_wait = _mismatch_messages()
    assert eager == on_wait


def _ring2(body, *args):
    mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
    specs = tuple(P("x") for _ in args)
    mapped = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P("x"), check_vma=False)
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
    return jax.jit(mapped)(*placed)


def test_kernel_remote_copy_with_mismatched_shapes_raises_in_on_wait_mode():
    def kernel(x_ref, o_ref, dst, send, recv):
        me = lax.axis_index("x")
        peer = lax.rem(me + 1, 2)
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(
            x_ref, dst, send, recv, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH
        )
        copy.start()
        copy.wait()
        o_ref[...] = x_ref[...]

    def body(x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((16, 64), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=mosaic_rt.InterpretParams(dma_execution_mode="on_wait", wait_timeout=30),
        )(x)

    x = np.ones((16, 128), np.float32)
    with pytest.raises(ValueError, match=r"\(8, 128\).*\(16, 64\)"):
        with mosaic_rt.native_errors():
            np.asarray(_ring2(body, x))


# ---------------------------------------------------- huge semaphore arrays


def test_semaphore_ids_past_int32_are_a_value_error_naming_the_size():
    rt = Runtime(1, 1)
    with pytest.raises(ValueError, match=r"2147483648 semaphores.*int32"):
        rt.allocate_semaphores(0, count=2**31)
    with pytest.raises(ValueError, match=r"semaphore count must be an integer in \[0, 4294967295\], got 4294967296"):
        rt.allocate_semaphores(0, count=2**32)
    assert rt.allocate_semaphores(0) == 2000


def _rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_huge_semaphore_array_is_cheap_until_used():
    rt = Runtime(2, 2, wait_timeout=5)
    before = _rss_bytes()
    first = rt.allocate_semaphores(0, count=50_000_000)
    grown = _rss_bytes() - before
    # 50M semaphores x 4 cores: ~1.6 MB of (lazily zeroed) page table at
    # most, nothing per semaphore (it used to be ~270 bytes each).
    assert grown < 16 * 2**20, grown
    assert rt.native.semaphore_pages_in_use() == 0
    last = first + 50_000_000 - 1
    rt.signal(0, 0, last, 2, target_device=1, target_core=1)
    assert rt.read(1, 1, last) == 2
    assert rt.leaks() == [mosaic_rt.Leak(last, "regular", 1, 1, 2)]
    rt.wait(1, 1, last, 2)
    assert rt.leaks() == []
    assert rt.native.semaphore_pages_in_use() == 1


def test_kernel_with_a_50_million_semaphore_array_runs():
    def kernel(o_ref, sems):
        pl.semaphore_signal(sems.at[49_999_999], 2)
        pl.semaphore_wait(sems.at[49_999_999], 2)
        o_ref[...] = jnp.ones_like(o_ref)

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR((50_000_000,))],
        interpret=mosaic_rt.InterpretParams(on_semaphore_leak="raise"),
    )()
    np.testing.assert_array_equal(np.asarray(out), 1)


# ------------------------------------------------------------- timeouts


@pytest.mark.parametrize("timeout", [1e19, 1e300, float("inf"), None])
def test_huge_or_infinite_timeouts_mean_no_timeout_and_never_panic(timeout):
    rt = Runtime(2, 1, wait_timeout=timeout)
    assert rt.wait_timeout is None
    sem = rt.allocate_semaphores(0)
    rt.allocate_semaphores(1)
    timer = threading.Timer(0.05, lambda: rt.signal(1, 0, sem, 1, target_device=0))
    timer.start()
    rt.wait(0, 0, sem, 1)  # used to raise pyo3's PanicException
    timer.join()
    barrier_peer = threading.Thread(target=rt.device_barrier, args=(1,))
    barrier_peer.start()
    rt.device_barrier(0)
    barrier_peer.join()


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan"), float("-inf")])
def test_bad_runtime_timeouts_are_value_errors_naming_the_value(timeout):
    with pytest.raises(ValueError, match=r"wait_timeout must be None or a number of seconds >= 0.*got"):
        Runtime(1, 1, wait_timeout=timeout)


def test_zero_timeout_times_out_at_once():
    rt = Runtime(1, 1, wait_timeout=0)
    sem = rt.allocate_semaphores(0)
    with pytest.raises(mosaic_rt.WaitTimeout):
        rt.wait(0, 0, sem, 1)


@pytest.mark.parametrize("timeout", [float("-inf"), float("nan"), -1, 0, 0.0, True, "1", [1]])
def test_interpret_params_validate_the_timeout_at_construction(timeout):
    with pytest.raises(ValueError, match="wait_timeout must be a positive number of seconds or None"):
        mosaic_rt.InterpretParams(wait_timeout=timeout)


def _signal_wait_kernel(params):
    def kernel(o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = jnp.full_like(o_ref, 3.0)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        interpret=params,
    )()


@pytest.mark.parametrize("timeout", [float("inf"), 1e17, 1e300, 10**400, 0.001])
def test_kernels_run_with_huge_or_infinite_timeouts(timeout):
    out = _signal_wait_kernel(mosaic_rt.InterpretParams(wait_timeout=timeout))
    np.testing.assert_array_equal(np.asarray(out), 3.0)


# --------------------------------------------------------- count overflow


def test_semaphore_count_overflow_is_an_error_and_leaves_the_count():
    rt = Runtime(1, 2)
    sem = rt.allocate_semaphores(0)
    rt.signal(0, 0, sem, 2**62, target_core=1)
    for _ in range(2):
        with pytest.raises(
            ValueError, match=(rf"semaphore {sem} on device 0, core 1 overflows: count {2**62} \+ increment {2**62}")
        ):
            rt.signal(0, 0, sem, 2**62, target_core=1)
    assert rt.read(0, 1, sem) == 2**62
    with pytest.raises(ValueError, match=r"overflows: .* exceeds the largest count 4611686018427387904 \(2\*\*62\)"):
        rt.signal(0, 0, sem, 1, target_core=1)
    with pytest.raises(ValueError, match="out of range"):
        rt.signal(0, 0, sem, 2**63, target_core=1)
    with pytest.raises(ValueError, match="increment >= 0"):
        rt.signal(0, 0, sem, -1, target_core=1)
    with pytest.raises(ValueError, match=r"needs a value in \[0, 4611686018427387904\]"):
        rt.wait(0, 1, sem, 2**62 + 1)
    rt.wait(0, 1, sem, 2**62)
    assert rt.read(0, 1, sem) == 0


def test_dma_byte_counts_cannot_overflow_either():
    rt = Runtime(1, 1, dma_execution_mode="eager")
    src = rt.allocate_buffer(0, 0, "hbm", np.ones(4, np.float32))
    dst = rt.allocate_buffer(0, 0, "vmem", shape=(4,), dtype=np.float32)
    sem = rt.allocate_semaphores(0, kind="dma")
    rt.signal(0, 0, sem, 2**62 - 8)
    with pytest.raises(ValueError, match="overflows"):
        rt.dma_start(0, 0, ("hbm", src), ("vmem", dst), sem)
    assert rt.read(0, 0, sem) == 2**62 - 8


# ---------------------------------------------- DMAs never waited for


def test_on_wait_dma_never_waited_is_a_leak_naming_the_dma():
    rt = Runtime(2, 1, dma_execution_mode="on_wait")
    src = rt.allocate_buffer(0, 0, "vmem", np.arange(8, dtype=np.float32))
    dst = rt.allocate_buffer(1, 0, "vmem", shape=(8,), dtype=np.float32)
    send = rt.allocate_semaphores(0, kind="dma")
    recv = rt.allocate_semaphores(1, kind="dma")
    rt.dma_start(0, 0, ("vmem", src, [(0, 4, 2)]), ("vmem", dst, [(0, 4)]), recv, src_sem=send, dst_device=1)
    leaks = rt.leaks()
    assert [(lk.device, lk.core, lk.sem, lk.count) for lk in leaks] == [(0, 0, send, 0), (1, 0, recv, 0)]
    (dma,) = leaks[1].pending_dmas
    for part in (
        "DMA of 16 bytes",
        f"vmem buffer {src} of device 0, core 0",
        f"vmem buffer {dst} of device 1, core 0",
        f"send semaphore {send} on device 0",
        f"receive semaphore {recv} on device 1",
    ):
        assert part in dma, (part, dma)
    assert rt.leaks(1) == [leaks[1]]
    rt.dma_wait(1, 0, recv, 16)
    np.testing.assert_array_equal(rt.load(1, 0, "vmem", dst, [(0, 4)]), [0, 2, 4, 6])
    assert [(lk.device, lk.sem, lk.count, lk.pending_dmas) for lk in rt.leaks()] == [(0, send, 16, ())]


def _unwaited_dma_kernel(params):
    def kernel(x_hbm, o_ref, scratch, sem):
        pltpu.make_async_copy(x_hbm, scratch, sem).start()
        o_ref[...] = jnp.zeros_like(o_ref)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
        interpret=params,
    )(jnp.ones((8, 128), jnp.float32))


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_kernel_dma_never_waited_raises_as_a_leak_in_both_modes(mode):
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, on_semaphore_leak="raise")
    match = "never waited for" if mode == "on_wait" else "has count 4096"
    with pytest.raises(mosaic_rt.SemaphoreLeakError, match=match):
        with mosaic_rt.native_errors():
            np.asarray(_unwaited_dma_kernel(params))


def test_kernel_dma_never_waited_is_reported_by_default(capsys):
    # "warn" reports it as stock reports leaks: printed (mosaic_rt.ffi.reports).
    out = _unwaited_dma_kernel(mosaic_rt.InterpretParams(dma_execution_mode="on_wait"))
    np.testing.assert_array_equal(np.asarray(out), 0)
    printed = capsys.readouterr().out
    assert "DMA(s) started but never waited for" in printed and "from hbm buffer" in printed, printed


# --------------------------------------------------------- range checks


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda rt: rt.leaks(99), r"device id 99 out of range: the kernel runs on 2 device\(s\) \(valid ids 0 to 1\)"),
        (lambda rt: rt.leaks(-1), r"device id -1 out of range"),
        (lambda rt: rt.fail("x", 99, 0), r"device id 99 out of range"),
        (lambda rt: rt.fail("x", 0, 3), r"core id 3 out of range: each device has 2 core\(s\) \(valid ids 0 to 1\)"),
        (lambda rt: rt.fail("x", 0, -2), r"core id -2 out of range"),
        (lambda rt: rt.barrier_semaphore(2, 0), r"device id 2 out of range"),
        (lambda rt: rt.device_barrier(-1), r"device id -1 out of range"),
        (lambda rt: rt.signal(0, 0, 2000, 1, target_device=7), r"device id 7 out of range"),
        (lambda rt: rt.signal(0, 0, 2000, 1, target_core=-1), r"core id -1 out of range"),
        (lambda rt: rt.wait(0, 5, 2000, 1), r"core id 5 out of range"),
        (lambda rt: rt.read(2**40, 0, 2000), rf"device id {2**40} out of range"),
        (lambda rt: rt.allocate_buffer(3, 0, "vmem", np.zeros(2)), r"device id 3 out of range"),
        (lambda rt: rt.load(0, 9, "vmem", 100), r"core id 9 out of range"),
        (
            lambda rt: rt.dma_start(0, 0, ("vmem", 100), ("vmem", 100), 2000, src_sem=2000, dst_device=-3),
            r"device id -3 out of range",
        ),
        (lambda rt: rt.read(0, 0, -1), r"semaphore id must be an integer in \[0, 4294967295\], got -1"),
        (lambda rt: rt.free_buffer(0, 0, "vmem", -5), r"buffer id must be an integer in \[0, 4294967295\], got -5"),
    ],
)
def test_every_device_and_core_argument_is_range_checked(call, match):
    rt = Runtime(2, 2, wait_timeout=1)
    with pytest.raises(ValueError, match=match) as info:
        call(rt)
    assert not isinstance(info.value, mosaic_rt.MosaicRuntimeError)
    assert rt.failure() is None
