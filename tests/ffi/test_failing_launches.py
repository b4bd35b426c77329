"""Failures end every device quickly with the root cause, typed, and leave
the next launch usable."""

from __future__ import annotations

import re
import time

import jax.numpy as jnp
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, on_devices, run_on_devices, with_token
from jax.errors import JaxRuntimeError
from mosaic_rt.errors import KernelAborted, SemaphoreLeakError, WaitTimeout

pytestmark = pytest.mark.timeout(120)


def run_translated(n, body):
    fn, args = on_devices(n, body, dummy_rows(n))
    with F.native_errors():
        return np.asarray(fn(*args))


def ring_ok(n):
    """A healthy ring launch, to show the next launch works after a failure."""
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, s, 2, target_device=(d + 1) % n)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, 1)
            k.token, c = F.semaphore_read(k.token, k.handle, d, 0, s)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, 1)
        return with_token(c[None], k.token)

    return run_on_devices(n, body, dummy_rows(n))


def test_unsatisfiable_wait_times_out_with_a_clear_error():
    uid = fresh_uid()

    def body(d, _):
        # Deadlock detection off: the timeout is the last resort it replaces.
        with begin(d, 1, uid=uid, wait_timeout=0.3, detect_deadlocks=False) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, 2)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    with pytest.raises(WaitTimeout) as info:
        run_translated(1, body)
    # Its own 300 ms timeout, not the 30 s default.
    assert re.search(r"semaphore 2000 on device 0, core 0 waited 0\.3s for count >= 2; count is 0", str(info.value)), (
        str(info.value)
    )
    assert (info.value.device, info.value.core) == (0, 0)
    assert isinstance(info.value.__cause__, JaxRuntimeError)
    np.testing.assert_array_equal(ring_ok(2), [1, 1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 8])
def test_error_on_one_device_ends_every_wait_with_the_root_cause(n):
    """Device 1 waits on a semaphore that does not exist; every other device
    waits for a signal that never comes (timeout 300 s). All must stop at
    once, and the error raised is device 1's, as a ValueError."""
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid, wait_timeout=300) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            bad = jnp.where(d == 1, 9999, s)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, bad, 1)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    t0 = time.monotonic()
    with pytest.raises(ValueError) as info:
        run_translated(n, body)
    # Compiling and running take seconds; a peer left to its 300 s timeout
    # (which also ends with the root cause) would take minutes.
    assert time.monotonic() - t0 < 150, "a waiter was not woken by the failure"
    exc = info.value
    assert not isinstance(exc, KernelAborted)
    assert "9999" in str(exc)
    assert (exc.device, exc.core) == (1, 0)
    # The exact root message, as the native layer reported it.
    wire = str(exc.__cause__)
    assert wire.endswith(f"ValueError: {exc}"), wire
    np.testing.assert_array_equal(ring_ok(n), np.ones(n))


def test_timeout_on_one_device_aborts_the_others():
    n = 2
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid, wait_timeout=0.4, detect_deadlocks=False) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            # Device 0 waits for nothing; device 1 waits for a count never sent.
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, d * 5)
            k.token = F.device_barrier(k.token, k.handle, d)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    with pytest.raises(WaitTimeout) as info:
        run_translated(n, body)
    assert info.value.device in (0, 1)
    np.testing.assert_array_equal(ring_ok(n), [1, 1])


def test_leak_policy_raise_names_the_semaphore():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0, count=2)
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, s + 1, 3)
            k.token, _ = F.leak_report(k.token, k.handle, d, policy="raise")
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    with pytest.raises(SemaphoreLeakError, match=r"semaphore 2001 .* core 0 has count 3"):
        run_translated(1, body)


def test_leak_policy_ignore_counts_leaks():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0, count=3)
            for j in range(3):
                k.token = F.semaphore_signal(k.token, k.handle, d, 0, s + j, 1, target_device=1)
            k.token = F.device_barrier(k.token, k.handle, d)
            k.token, leaks = F.leak_report(k.token, k.handle, d, policy="ignore")
            k.token = F.device_barrier(k.token, k.handle, d)
        return with_token(leaks[None], k.token)

    np.testing.assert_array_equal(run_on_devices(2, body, dummy_rows(2)), [0, 3])


def test_translate_leaves_other_exceptions_alone():
    e = RuntimeError("x")
    assert F.translate(e) is e
    j = JaxRuntimeError("INVALID_ARGUMENT: something else")
    assert F.translate(j) is j
    with pytest.raises(KeyError):
        with F.native_errors():
            raise KeyError("k")


def test_translate_falls_back_to_the_text_when_the_record_is_gone():
    j = JaxRuntimeError("INVALID_ARGUMENT: [mosaic_rt#999999999] IndexError: out of bounds here")
    t = F.translate(j)
    assert type(t) is IndexError and str(t) == "out of bounds here" and t.__cause__ is j
    # The wire text's trailing source line is the site, not the message.
    j = JaxRuntimeError(
        "INVALID_ARGUMENT: [mosaic_rt#999999998] IndexError: out of bounds here\n"
        "(raised by the kernel op at k.py:3:4 (kernel))"
    )
    t = F.translate(j)
    assert str(t) == "out of bounds here" and t.site == "k.py:3:4 (kernel)", (str(t), t.site)


def test_native_errors_works_as_a_decorator():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid) as k:
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, 4242, 1)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    fn, args = on_devices(1, body, dummy_rows(1))

    @F.native_errors()
    def go():
        return np.asarray(fn(*args))

    with pytest.raises(ValueError, match="4242"):
        go()
