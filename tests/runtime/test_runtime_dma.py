"""Local and remote DMAs through the binding, in both execution modes."""

import threading

import numpy as np
import pytest
from mosaic_rt import KernelAborted, Runtime

MODES = ["eager", "on_wait"]


@pytest.mark.parametrize("mode", MODES)
def test_local_dma_strided(mode):
    rt = Runtime(1, 1, dma_execution_mode=mode, wait_timeout=10)
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    src = rt.allocate_buffer(0, 0, "hbm", x)
    dst = rt.allocate_buffer(0, 0, "vmem", shape=(4, 4), dtype=np.float32)
    sem = rt.allocate_semaphores(0, kind="dma")
    rt.dma_start(0, 0, ("hbm", src, [(0, 4, 2), (1, 4, 2)]), ("vmem", dst), sem)
    rt.dma_wait(0, 0, sem, 4 * 4 * 4)
    np.testing.assert_array_equal(rt.load(0, 0, "vmem", dst), x[0:8:2, 1:9:2])
    assert rt.leaks() == []


@pytest.mark.parametrize("mode", MODES)
def test_remote_dma_single_thread(mode):
    rt = Runtime(2, 1, dma_execution_mode=mode, wait_timeout=10)
    x = np.arange(10, dtype=np.int64)
    src = rt.allocate_buffer(0, 0, "vmem", x)
    dst = rt.allocate_buffer(1, 0, "vmem", shape=(10,), dtype=np.int64)
    send = rt.allocate_semaphores(0, None, kind="dma")
    recv = rt.allocate_semaphores(1, None, kind="dma")
    assert send == recv
    rt.dma_start(0, 0, ("vmem", src), ("vmem", dst), recv, src_sem=send, dst_device=1)
    rt.dma_wait(0, 0, send, x.nbytes)  # send side
    rt.dma_wait(1, 0, recv, x.nbytes)  # receive side
    np.testing.assert_array_equal(rt.load(1, 0, "vmem", dst), x)
    assert rt.leaks() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", MODES)
def test_ring_of_remote_dmas_on_threads(mode):
    n, rounds = 8, 20
    rt = Runtime(n, 1, dma_execution_mode=mode, wait_timeout=30)
    bufs = [rt.allocate_buffer(d, 0, "vmem", np.full(256, d, np.int32)) for d in range(n)]
    inbox = [rt.allocate_buffer(d, 0, "vmem", shape=(256,), dtype=np.int32) for d in range(n)]
    sems = [rt.allocate_semaphores(d, kind="dma", count=2) for d in range(n)]
    ready = [rt.allocate_semaphores(d) for d in range(n)]
    errors = []

    def device(d):
        right, left = (d + 1) % n, (d - 1) % n
        send, recv = sems[d], sems[d] + 1
        try:
            for _ in range(rounds):
                # Tell the left neighbour our inbox is free, wait for the right one.
                rt.signal(d, 0, ready[d], 1, target_device=left)
                rt.wait(d, 0, ready[d], 1)
                rt.dma_start(d, 0, ("vmem", bufs[d]), ("vmem", inbox[right]), recv, src_sem=send, dst_device=right)
                rt.dma_wait(d, 0, send, 1024)
                rt.dma_wait(d, 0, recv, 1024)
                assert (rt.load(d, 0, "vmem", inbox[d]) == left).all()
                rt.device_barrier(d)  # nobody overwrites an inbox still being checked
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            rt.fail(f"device {d}: {e!r}", d, 0)

    threads = [threading.Thread(target=device, args=(d,)) for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    assert rt.leaks() == []


@pytest.mark.parametrize("mode", MODES)
def test_bad_dma_requests_are_value_errors(mode):
    rt = Runtime(2, 1, dma_execution_mode=mode, wait_timeout=5)
    src = rt.allocate_buffer(0, 0, "vmem", np.zeros(4, np.float32))
    dst = rt.allocate_buffer(0, 0, "vmem", np.zeros(8, np.float32))
    sem = rt.allocate_semaphores(0, None, kind="dma")
    with pytest.raises(ValueError, match="Either both or neither"):
        rt.dma_start(0, 0, ("vmem", src), ("vmem", dst, [(0, 4)]), sem, src_sem=sem)
    with pytest.raises(ValueError):
        rt.dma_start(0, 0, ("vmem", src), ("vmem", dst), sem)  # shape mismatch
    with pytest.raises(ValueError):
        rt.dma_start(0, 0, ("vmem", src), ("vmem", 4242), sem)  # unknown buffer
    with pytest.raises(ValueError):
        rt.dma_start(0, 0, ("vmem", src), ("vmem", dst, [(0, 4)]), sem, src_sem=sem, dst_device=7)  # unknown device
    with pytest.raises(TypeError):
        rt.dma_start(0, 0, "vmem", ("vmem", dst), sem)
    rt.dma_start(0, 0, ("vmem", src), ("vmem", dst, [(4, 4)]), sem)
    rt.dma_wait(0, 0, sem, 16)
    assert rt.leaks() == []


@pytest.mark.timeout(30)
def test_dma_wait_aborted_by_failure():
    rt = Runtime(2, 1, wait_timeout=20)
    sem = rt.allocate_semaphores(1, kind="dma")
    got = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(KernelAborted, rt.dma_wait, 1, 0, sem, 64)))
    t.start()
    rt.fail("dma engine fell over", 0, 0, kind="IndexError")
    t.join(15)
    assert not t.is_alive()
    assert isinstance(got[0].value.root, IndexError)
