"""Semaphores, failures and timeouts through the binding, driven by Python
threads (each plays one core)."""

import threading
import time

import pytest
from mosaic_rt import KernelAborted, MosaicRuntimeError, Runtime, WaitTimeout


def run_threads(targets):
    """Runs callables on threads; re-raises the first exception."""
    errors = []

    def guard(fn):
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "threads did not finish"
    if errors:
        raise errors[0]


@pytest.mark.timeout(60)
def test_eight_threads_ping_pong_release_the_gil():
    """Each of 8 devices waits for its left neighbour and signals its right
    one, 200 rounds. Works only if `wait` releases the GIL."""
    n, rounds = 8, 200
    rt = Runtime(n, 1, wait_timeout=30)
    sem = rt.allocate_semaphores(0)
    for d in range(1, n):
        assert rt.allocate_semaphores(d) == sem

    def device(d):
        for _ in range(rounds):
            if d == 0:
                rt.signal(d, 0, sem, 1, target_device=1)
                rt.wait(d, 0, sem, 1)
            else:
                rt.wait(d, 0, sem, 1)
                rt.signal(d, 0, sem, 1, target_device=(d + 1) % n)

    run_threads([lambda d=d: device(d) for d in range(n)])
    assert rt.leaks() == []


@pytest.mark.timeout(60)
def test_many_waiters_on_one_core_counter():
    rt = Runtime(2, 2, wait_timeout=30)
    sem = rt.allocate_semaphores(0)  # on every core of device 0
    waiters = [lambda: rt.wait(0, 1, sem, 2) for _ in range(4)]
    signaller = [lambda: [rt.signal(1, 0, sem, 1, target_device=0, target_core=1) for _ in range(8)]]
    run_threads(waiters + signaller)
    assert rt.read(0, 1, sem) == 0


def test_signal_defaults_to_core_zero_of_own_device():
    rt = Runtime(2, 2)
    sem = rt.allocate_semaphores(1)
    rt.signal(1, 1, sem, 5)
    assert (rt.read(1, 0, sem), rt.read(1, 1, sem)) == (5, 0)
    rt.wait(1, 0, sem, 5)


def test_collision_message_is_stock():
    rt = Runtime(1, 1)
    sem = rt.allocate_semaphores(0)
    with pytest.raises(ValueError, match=rf"^Semaphore {sem} occurs as both fixed-id and internal\."):
        rt.barrier_semaphore(0, sem)
    other = Runtime(1, 1)
    fixed = other.barrier_semaphore(0, 2000)
    with pytest.raises(ValueError, match=r"^Semaphore 2000 occurs as both fixed-id and internal\."):
        other.allocate_semaphores(0)
    with pytest.raises(ValueError, match=r"^Semaphore 2000 occurs as both fixed-id and internal\.$"):
        other.signal(0, 0, fixed, 1)


def test_semaphore_kinds_and_leaks():
    rt = Runtime(2, 1)
    reg = rt.allocate_semaphores(0, kind="regular", count=2)
    dma = rt.allocate_semaphores(0, kind="dma")
    assert dma == reg + 2
    rt.signal(0, 0, reg + 1, 3)
    rt.signal(0, 0, dma, 64)
    leaks = rt.leaks()
    assert {(leak.sem, leak.kind, leak.device, leak.core, leak.count) for leak in leaks} == {
        (reg + 1, "regular", 0, 0, 3),
        (dma, "dma", 0, 0, 64),
    }
    assert rt.leaks(device=1) == []
    with pytest.raises(ValueError, match="semaphore kind"):
        rt.allocate_semaphores(0, kind="mutex")


@pytest.mark.parametrize(
    "call",
    [
        lambda rt: rt.signal(0, 0, 7777, 1),  # unknown semaphore
        lambda rt: rt.signal(0, 0, 2000, 1, target_device=9),  # no such device
        lambda rt: rt.signal(0, 0, 2000, 1, target_core=3),  # no such core
        lambda rt: rt.signal(0, 0, 2000, 2**70),  # huge increment
        lambda rt: rt.wait(0, 0, 2000, -1),  # negative wait value
        lambda rt: rt.read(0, 0, -5),  # negative id
        lambda rt: rt.allocate_semaphores(0, count=2**40),  # huge count
    ],
)
def test_bad_semaphore_input_is_a_value_error(call):
    rt = Runtime(2, 1, wait_timeout=5)
    assert rt.allocate_semaphores(0, None) == 2000
    with pytest.raises(ValueError):
        call(rt)
    assert rt.failure() is None
    rt.signal(0, 0, 2000, 1)
    rt.wait(0, 0, 2000, 1)


@pytest.mark.timeout(30)
def test_timed_out_wait_raises_wait_timeout():
    rt = Runtime(1, 1, wait_timeout=0.3)
    sem = rt.allocate_semaphores(0)
    start = time.monotonic()
    with pytest.raises(WaitTimeout) as info:
        rt.wait(0, 0, sem, 1)
    assert time.monotonic() - start > 0.25  # not early; how late is the scheduler's business
    assert "waited 0.3s" in str(info.value), str(info.value)
    assert isinstance(info.value, TimeoutError)
    assert (info.value.device, info.value.core) == (0, 0)
    assert str(sem) in str(info.value)


@pytest.mark.timeout(60)
def test_failed_core_aborts_every_parked_waiter():
    rt = Runtime(4, 2, wait_timeout=30)
    sem = rt.allocate_semaphores(0)
    for d in range(1, 4):
        rt.allocate_semaphores(d)
    caught = []
    lock = threading.Lock()

    def waiter(d, c):
        try:
            rt.wait(d, c, sem, 1)
        except KernelAborted as e:
            with lock:
                caught.append(e)

    threads = [threading.Thread(target=waiter, args=(d, c)) for d in range(1, 4) for c in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # let them park
    root = rt.fail("core exploded", 0, 1, kind="ValueError")
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert len(caught) == 6
    assert isinstance(root, ValueError) and str(root) == "core exploded"
    for e in caught:
        assert isinstance(e.root, ValueError) and str(e.root) == "core exploded"
        assert (e.root.device, e.root.core) == (0, 1)
        assert "device 0, core 1 failed first" in str(e)
    # Later operations abort too, and the first failure stays the root.
    rt.fail("second", 2, 0)
    with pytest.raises(KernelAborted) as later:
        rt.wait(3, 0, sem, 1)
    assert str(later.value.root) == "core exploded"
    assert isinstance(rt.failure(), ValueError)


def test_fail_rejects_unknown_kind():
    rt = Runtime(1, 1)
    with pytest.raises(ValueError, match="unknown error kind"):
        rt.fail("x", 0, 0, kind="KeyboardInterrupt")
    assert rt.failure() is None
    assert isinstance(rt.fail("x", 0, 0), MosaicRuntimeError)


@pytest.mark.timeout(60)
def test_device_barrier_releases_all_devices():
    n = 4
    rt = Runtime(n, 1, wait_timeout=30)
    passed = []
    run_threads([lambda d=d: (rt.device_barrier(d), passed.append(d)) for d in range(n)])
    assert sorted(passed) == list(range(n))


@pytest.mark.timeout(60)
def test_two_runtimes_at_once_one_fails_the_other_finishes():
    n, rounds = 4, 100
    good, bad = Runtime(n, 1, wait_timeout=30), Runtime(n, 1, wait_timeout=30)
    for rt in (good, bad):
        for d in range(n):
            assert rt.allocate_semaphores(d) == 2000
    aborted = []

    def ring(rt, d):
        try:
            for _ in range(rounds):
                if d == 0:
                    rt.signal(0, 0, 2000, 1, target_device=1)
                    rt.wait(0, 0, 2000, 1)
                else:
                    rt.wait(d, 0, 2000, 1)
                    rt.signal(d, 0, 2000, 1, target_device=(d + 1) % n)
        except KernelAborted as e:
            aborted.append(e)

    # Device 0 of `bad` never starts: its ring stalls until the failure below.
    threads = [threading.Thread(target=ring, args=(good, d)) for d in range(n)]
    threads += [threading.Thread(target=ring, args=(bad, d)) for d in range(1, n)]
    for t in threads:
        t.start()
    for t in threads[:n]:
        t.join(30)
    assert good.leaks() == [] and good.failure() is None
    bad.fail("device 0 never came up", 0, 0)
    for t in threads[n:]:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(aborted) == n - 1
    assert all(str(e.root) == "device 0 never came up" for e in aborted)
