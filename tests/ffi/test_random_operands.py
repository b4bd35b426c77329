"""Fuzzing of the FFI handlers with random dynamic operands: device, core,
semaphore and buffer ids, increments, wait values and region starts are
int32 operands of one compiled program per op, fed random (mostly bad)
values. Every run either works or fails with a translated error of an
expected type naming the bad value -- never a crash, a panic or a hang --
and the next launch runs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, fresh_uid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXPECTED = (ValueError, IndexError, mosaic_rt.MosaicRuntimeError)
KNOBS = 6
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

knob = st.one_of(
    st.integers(-2, 3),
    st.integers(1998, 2003),
    st.integers(98, 102),
    st.sampled_from([I32_MIN, I32_MAX, 2**30, -(2**30)]),
)


def _build(op, mode):
    """A jitted 1-device, 2-core program running `op` with the knobs."""
    uid = fresh_uid()
    f32 = np.float32

    def program(k):
        with begin(0, 1, uid=uid, num_cores=2, wait_timeout=0.02, dma_execution_mode=mode) as kn:
            t, h = kn.token, kn.handle
            t, buf = F.allocate_buffer(
                t, h, 0, None, space="vmem", dtype=f32, shape=(8,), init=jnp.arange(8, dtype=f32)
            )
            t, sem = F.allocate_semaphores(t, h, 0, None, kind="dma", count=2)
            out = jnp.zeros((2,), f32)
            if op == "signal":
                t = F.semaphore_signal(t, h, k[0], k[1], k[2], k[3], target_device=k[4], target_core=k[5])
            elif op == "wait":
                t = F.semaphore_signal(t, h, 0, 0, sem, 4)
                t = F.semaphore_wait(t, h, k[0], k[1], k[2], k[3])
            elif op == "read":
                t, v = F.semaphore_read(t, h, k[0], k[1], k[2])
                out = out + v.astype(f32)
            elif op == "load":
                t, v = F.load(
                    t, h, k[0], k[1], k[2], F.TracedRegion.slices((k[3], 2)), space="vmem", shape=(2,), dtype=f32
                )
                out = out + v
            elif op == "store":
                t = F.store(t, h, k[0], k[1], k[2], F.TracedRegion.slices((k[3], 2)), jnp.ones((2,), f32), space="vmem")
            elif op == "dma":
                t = F.dma_start(
                    t,
                    h,
                    k[0],
                    k[1],
                    F.DmaStart(
                        F.DmaSide("vmem", k[2], F.TracedRegion.slices((k[3], 2))),
                        F.DmaSide("vmem", buf, F.TracedRegion.slices((k[4], 2))),
                        k[5],
                    ),
                )
                t = F.dma_wait(t, h, 0, 0, F.DmaWait(sem, 8))
            elif op == "remote_dma":
                t = F.dma_start(
                    t,
                    h,
                    0,
                    0,
                    F.DmaStart(
                        F.DmaSide("vmem", buf, F.TracedRegion.slices((k[3], 2))),
                        F.DmaSide("vmem", buf, F.TracedRegion.slices((k[4], 2))),
                        k[5],
                        src_sem=k[2],
                        dst_device=k[0],
                    ),
                )
            elif op == "free":
                t = F.free_buffer(t, h, k[0], k[1], k[2], space="vmem")
            else:
                raise AssertionError(op)
            # Leave nothing behind on success (waits for what the op did).
            kn.token = t
        return out + (kn.token * 0).astype(f32)

    return jax.jit(program)


OPS = ["signal", "wait", "read", "load", "store", "dma", "remote_dma", "free"]
_PROGRAMS: dict = {}


def _program(op, mode):
    if (op, mode) not in _PROGRAMS:
        _PROGRAMS[op, mode] = _build(op, mode)
    return _PROGRAMS[op, mode]


def _run(op, mode, knobs):
    fn = _program(op, mode)
    with F.native_errors():
        return np.asarray(fn(jax.device_put(np.asarray(knobs, np.int32), jax.devices()[0])))


def _healthy(mode):
    """A valid launch of the same program runs right after."""
    good = {"read": [0, 1, 2000, 0, 0, 0], "load": [0, 1, 100, 6, 0, 0]}
    np.testing.assert_array_equal(_run("read", mode, good["read"]), 0)
    np.testing.assert_array_equal(_run("load", mode, good["load"]), [6, 7])


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
@pytest.mark.parametrize("op", OPS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(knobs=st.lists(knob, min_size=KNOBS, max_size=KNOBS))
def test_random_operands_never_crash_panic_or_hang(op, mode, knobs):
    try:
        _run(op, mode, knobs)
    except EXPECTED as e:
        msg = str(e)
        assert "panicked" not in msg, msg
        assert "[mosaic_rt#" not in msg, f"untranslated: {msg}"
        # The error names one of the bad operands (or is stock's descriptor
        # message: -1 is "no semaphore / no device" at this level).
        assert any(str(v) in msg for v in knobs) or "Either both or neither" in msg, msg
    except BaseException as e:
        raise AssertionError(f"{op}{tuple(knobs)}: {type(e).__name__}: {e}") from e
    _healthy(mode)


@pytest.mark.parametrize(
    "knobs, exc, text",
    [
        ([1, 0, 2000, 1, 0, 0], ValueError, "device id 1 out of range: the kernel runs on 1 device(s)"),
        ([-3, 0, 2000, 1, 0, 0], ValueError, "device id must be >= 0, got -3"),
        ([0, 2, 2000, 1, 0, 0], ValueError, "core id 2 out of range: each device has 2 core(s)"),
        ([0, 0, 2000, 1, 5, 0], ValueError, "device id 5 out of range"),
        ([0, 0, 2000, 1, 0, 9], ValueError, "core id 9 out of range"),
        # A given target is never "none": -1 is range-checked like any id.
        ([0, 0, 2000, 1, -1, 0], ValueError, "target device id -1 out of range: valid ids are 0 to 0"),
        ([0, 0, 2000, 1, 0, -1], ValueError, "target core id -1 out of range: valid ids are 0 to 1"),
        ([0, 0, 1999, 1, 0, 0], ValueError, "semaphore 1999 does not exist"),
        ([0, 0, 2000, -1, 0, 0], ValueError, "increment >= 0, got -1"),
    ],
)
def test_bad_signal_operands_name_the_value(knobs, exc, text):
    with pytest.raises(exc) as info:
        _run("signal", "on_wait", knobs)
    assert text in str(info.value), str(info.value)
    _healthy("on_wait")


def test_a_wait_that_cannot_succeed_times_out_and_the_next_launch_runs():
    with pytest.raises(mosaic_rt.WaitTimeout, match="semaphore 2000 on device 0, core 1"):
        _run("wait", "on_wait", [0, 1, 2000, 1, 0, 0])
    _healthy("on_wait")
