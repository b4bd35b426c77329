"""Multi-device FFI runs under shard_map: semaphore rings, remote DMAs, barriers."""

from __future__ import annotations

import ffi_support
import jax
import jax.numpy as jnp
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, run_on_devices, with_token

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("n", [2, 8, 16])
def test_ring_ping_pong_in_fori_loop(n):
    """Each step every device signals its right neighbour by (i + d + 2) and
    waits for (i + left + 1) from its left one: each step leaves exactly 1
    behind, so the final count is the number of steps."""
    steps = 25
    uid = fresh_uid()

    def body(d, _):
        left = (d + n - 1) % n
        with begin(d, n, uid=uid) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)

            def step(i, tok):
                tok = F.semaphore_signal(tok, k.handle, d, 0, sem, i + d + 2, target_device=(d + 1) % n)
                return F.semaphore_wait(tok, k.handle, d, 0, sem, i + left + 1)

            k.token = jax.lax.fori_loop(0, steps, step, k.token)
            k.token, count = F.semaphore_read(k.token, k.handle, d, 0, sem)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, sem, count)
            k.token, leaks = F.leak_report(k.token, k.handle, d, policy="raise")
        return with_token(jnp.stack([count, leaks])[None], k.token)

    out = run_on_devices(n, body, dummy_rows(n))
    np.testing.assert_array_equal(out, np.tile([[steps, 0]], (n, 1)))


@pytest.mark.parametrize("mode", ["eager", "on_wait", "tpu"])
@pytest.mark.parametrize("n", [2, 8, 16])
def test_all_to_all_remote_dma(n, mode):
    """Device d sends row p of its HBM buffer to row d of device p's buffer:
    the result is the block transpose, checked against numpy."""
    cols = 3
    x = np.arange(n * n * cols, dtype=np.float32).reshape(n, n, cols)
    nbytes = cols * 4
    uid = fresh_uid()

    def body(d, x_local):
        with begin(d, n, uid=uid, dma_execution_mode=mode) as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=np.float32, shape=(n, cols), init=x_local[0])
            t, dst = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=np.float32, shape=(n, cols))
            t, send = F.allocate_semaphores(t, h, d, 0, kind="dma")
            t, recv = F.allocate_semaphores(t, h, d, 0, kind="dma")
            # Every destination buffer must exist before the first remote write.
            t = F.device_barrier(t, h, d)
            for p in range(n):
                t = F.dma_start(
                    t,
                    h,
                    d,
                    0,
                    F.DmaStart(
                        F.DmaSide("hbm", src, F.TracedRegion.index(p)),
                        F.DmaSide("hbm", dst, F.TracedRegion.index(d)),
                        recv,
                        src_sem=send,
                        dst_device=p,
                    ),
                )
            for _ in range(n):
                t = F.dma_wait(t, h, d, 0, F.DmaWait(send, nbytes))
                t = F.dma_wait(t, h, d, 0, F.DmaWait(recv, nbytes))
            t = F.device_barrier(t, h, d)
            t, got = F.load(t, h, d, 0, dst, None, space="hbm", shape=(n, cols), dtype=np.float32)
            t, leaks = F.leak_report(t, h, d, policy="raise")
            k.token = t
        return with_token(got[None], k.token)

    out = run_on_devices(n, body, x)
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2))


@pytest.mark.parametrize("n", [2, 8])
def test_barrier_orders_stores_before_remote_reads(n):
    """Each device stores its id, barriers, then DMAs its right neighbour's
    value into local memory: the barrier guarantees every store landed."""
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid) as k:
            h, t = k.handle, k.token
            t, buf = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=np.int32, shape=(2,))
            t = F.store(t, h, d, 0, buf, F.TracedRegion.index(0), d * 10 + 1, space="vmem")
            t = F.device_barrier(t, h, d)
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="regular")
            t = F.semaphore_signal(t, h, d, 0, sem, d + 1, target_device=(d + 1) % n)
            t = F.semaphore_wait(t, h, d, 0, sem, (d + n - 1) % n + 1)
            t = F.device_barrier(t, h, d)
            t, v = F.load(t, h, d, 0, buf, F.TracedRegion.index(0), space="vmem", shape=(), dtype=np.int32)
            k.token = t
        return with_token(v[None], k.token)

    out = run_on_devices(n, body, dummy_rows(n))
    np.testing.assert_array_equal(out, np.arange(n) * 10 + 1)


def test_two_launches_in_one_program_are_separate():
    """The k-th kernel_begin of a device joins the k-th launch."""
    n = 2
    uid = fresh_uid()

    def body(d, _):
        counts = []
        tok = F.new_token()
        for j in range(2):
            with ffi_support.kernel(tok, d, uid=uid, num_devices=n, wait_timeout=30) as k:
                k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)
                k.token = F.semaphore_signal(k.token, k.handle, d, 0, sem, j + 1, target_device=1 - d)
                k.token, c = F.semaphore_read(k.token, k.handle, d, 0, sem)
                k.token = F.device_barrier(k.token, k.handle, d)
                k.token, c = F.semaphore_read(k.token, k.handle, d, 0, sem)
                k.token = F.semaphore_wait(k.token, k.handle, d, 0, sem, c)
            tok = k.token
            counts.append(c)
        return with_token(jnp.stack(counts)[None], tok)

    out = run_on_devices(n, body, dummy_rows(n))
    np.testing.assert_array_equal(out, [[1, 2], [1, 2]])
