"""`python -m mosaic_rt demo`: exercises the native runtime from Python.

N Python threads play N simulated devices in a ring. Every round each device
writes a fresh block, tells its left neighbour that its inbox is free, waits
for the same from its right neighbour, sends its block to the right
neighbour's inbox with a remote DMA (send and receive DMA semaphores), waits
for both, checks what arrived from the left, and joins a device barrier.
All blocking happens in Rust with the GIL released.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from mosaic_rt.runtime import Runtime


def ring_exchange(num_devices: int, rounds: int, elems: int, mode: str) -> dict:
    """Runs the ring; returns timings. Raises if any device saw wrong data."""
    rt = Runtime(num_devices, 1, dma_execution_mode=mode, wait_timeout=60)
    block = [rt.allocate_buffer(d, 0, "vmem", shape=(elems,), dtype=np.float32) for d in range(num_devices)]
    inbox = [rt.allocate_buffer(d, 0, "vmem", shape=(elems,), dtype=np.float32) for d in range(num_devices)]
    send = rt.allocate_semaphores(0, kind="dma", count=2)  # same ids on every device
    for d in range(1, num_devices):
        rt.allocate_semaphores(d, kind="dma", count=2)
    free = rt.allocate_semaphores(0)
    for d in range(1, num_devices):
        rt.allocate_semaphores(d)
    recv, nbytes = send + 1, elems * 4
    errors: list[BaseException] = []
    start_gate = threading.Barrier(num_devices + 1)

    def device(d: int) -> None:
        left, right = (d - 1) % num_devices, (d + 1) % num_devices
        try:
            start_gate.wait()
            for r in range(rounds):
                rt.store(d, 0, "vmem", block[d], np.float32(d * 1000 + r))
                rt.signal(d, 0, free, 1, target_device=left)
                rt.wait(d, 0, free, 1)
                rt.dma_start(d, 0, ("vmem", block[d]), ("vmem", inbox[right]), recv, src_sem=send, dst_device=right)
                rt.dma_wait(d, 0, send, nbytes)
                rt.dma_wait(d, 0, recv, nbytes)
                got = rt.load(d, 0, "vmem", inbox[d], [(0, 1)])[0]
                if got != left * 1000 + r:
                    raise AssertionError(f"device {d} round {r}: got {got} from device {left}")
                rt.device_barrier(d)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)
            rt.fail(f"device {d} failed: {e!r}", d, 0)

    threads = [threading.Thread(target=device, args=(d,)) for d in range(num_devices)]
    for t in threads:
        t.start()
    start_gate.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    leaks = rt.leaks()
    if leaks:
        raise AssertionError(f"semaphores left non-zero: {leaks}")
    return {
        "mode": mode,
        "round_us": elapsed / rounds * 1e6,
        "gbps": num_devices * rounds * nbytes / elapsed / 1e9,
        "elapsed_s": elapsed,
    }


def main(num_devices: int = 8, rounds: int = 200, elems: int = 16384) -> int:
    print(
        f"mosaic_rt demo: {num_devices} devices (one Python thread each) in a ring, "
        f"{rounds} rounds, {elems * 4 // 1024} KiB remote DMA per device per round"
    )
    print(f"{'dma mode':>9} {'per round':>12} {'DMA throughput':>16} {'total':>9}")
    for mode in ("eager", "on_wait"):
        r = ring_exchange(num_devices, rounds, elems, mode)
        print(f"{r['mode']:>9} {r['round_us']:>9.1f} us {r['gbps']:>11.2f} GB/s {r['elapsed_s']:>7.2f} s")
    print("all transfers checked: OK")
    return 0
