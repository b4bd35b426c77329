"""Micro-benchmarks of the runtime through the Python binding.

Prints a table (not a test): per-call cost of semaphore operations, a
2-thread ping-pong round trip, and DMAs against numpy.copyto of the same
size. Run after `pip install .` (a release build):

    python benches/bench_runtime.py [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from mosaic_rt import Runtime
from mosaic_rt.ffi.requests import DmaSide, DmaStart


def best_per_op(fn, n: int, repeats: int) -> float:
    """Best (over `repeats`) seconds per operation of `fn(n)` doing n ops."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def bench_signal(n, repeats):
    rt = Runtime(1, 1, wait_timeout=10)
    native, sem = rt.native, rt.allocate_semaphores(0)

    def native_loop(n):
        sig = native.signal
        for _ in range(n):
            sig(0, 0, sem, 1)

    def wrapper_loop(n):
        for _ in range(n):
            rt.signal(0, 0, sem, 1)

    return best_per_op(native_loop, n, repeats), best_per_op(wrapper_loop, n, repeats)


def bench_signal_wait(n, repeats):
    rt = Runtime(1, 1, wait_timeout=10)
    native, sem = rt.native, rt.allocate_semaphores(0)

    def loop(n):
        sig, wait = native.signal, native.wait
        for _ in range(n):
            sig(0, 0, sem, 1)
            wait(0, 0, sem, 1)

    return best_per_op(loop, n, repeats)


def bench_ping_pong(n, repeats):
    """Round trip: device 0 signals device 1 and waits for its answer."""

    def run(n):
        rt = Runtime(2, 1, wait_timeout=30)
        native = rt.native
        sem = rt.allocate_semaphores(0)
        rt.allocate_semaphores(1)

        def pong():
            for _ in range(n):
                native.wait(1, 0, sem, 1)
                native.signal(1, 0, sem, 1, 0)

        t = threading.Thread(target=pong)
        t.start()
        for _ in range(n):
            native.signal(0, 0, sem, 1, 1)
            native.wait(0, 0, sem, 1)
        t.join()

    return best_per_op(run, n, repeats)


def bench_dma(nbytes, n, repeats, mode):
    elems = nbytes // 4
    rt = Runtime(1, 1, dma_execution_mode=mode, wait_timeout=10)
    native = rt.native
    src = rt.allocate_buffer(0, 0, "hbm", np.ones(elems, np.float32))
    dst = rt.allocate_buffer(0, 0, "vmem", shape=(elems,), dtype=np.float32)
    sem = rt.allocate_semaphores(0, kind="dma")

    def dma(n):
        start, wait = native.dma_start, native.dma_wait
        request = DmaStart(DmaSide("hbm", src), DmaSide("vmem", dst), sem)
        for _ in range(n):
            start(0, 0, request)
            wait(0, 0, sem, nbytes)

    a, b = np.ones(elems, np.float32), np.empty(elems, np.float32)

    def copy(n):
        for _ in range(n):
            np.copyto(b, a)

    return best_per_op(dma, n, repeats), best_per_op(copy, n, repeats)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    reps = 3 if args.quick else 5

    rows = []
    native, wrapper = bench_signal(200_000 // scale, reps)
    rows.append(("signal (native method)", native, None))
    rows.append(("signal (mosaic_rt.Runtime)", wrapper, None))
    rows.append(("signal + wait pair", bench_signal_wait(100_000 // scale, reps), None))
    rows.append(("2-thread ping-pong round trip", bench_ping_pong(20_000 // scale, reps), None))
    for label, nbytes, iters in (("1 KiB", 1024, 50_000), ("1 MiB", 1 << 20, 500)):
        for mode in ("eager", "on_wait"):
            dma, copy = bench_dma(nbytes, max(iters // scale, 10), reps, mode)
            rows.append((f"DMA {label} {mode} (start+wait)", dma, copy))

    print(f"{'operation':<34} {'per op':>10} {'numpy.copyto':>13} {'ratio':>7}")
    for name, t, ref in rows:
        ref_s = f"{ref * 1e6:>10.2f} us" if ref else f"{'':>13}"
        ratio = f"{t / ref:>6.2f}x" if ref else ""
        print(f"{name:<34} {t * 1e6:>7.2f} us {ref_s} {ratio:>7}")


if __name__ == "__main__":
    main()
