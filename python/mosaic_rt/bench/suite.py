"""The benchmark suite: which kernels run at which sizes, and what they should compute.

A `Case` names one kernel at one size. `suite(quick)` lists them; `--quick`
uses fewer and smaller sweep points so the whole run stays near two minutes on
two cores (stock interpret mode costs milliseconds per operation).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from mosaic_rt.bench import collectives, local

# What one operation of a case is, for the per-operation cost columns.
SEM_OP, DMA, GRID_STEP = "sem op", "DMA", "grid step"


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    unit: str
    target: float
    # "call": ratio of whole-call medians at the sweep's largest point.
    # "per-op": ratio of marginal per-operation costs (slope over the sweep).
    judged_by: str
    description: str


FAMILIES = {
    f.name: f
    for f in [
        Family("ping-pong", SEM_OP, 100, "call", "2 devices bounce a REGULAR semaphore (rounds sweep)"),
        Family("right-permute", DMA, 100, "call", "8 devices, one remote DMA to the right"),
        Family("all-gather", DMA, 100, "call", "8-device ring all-gather, 7 remote DMAs per device"),
        Family("reduce-scatter", DMA, 100, "call", "8-device ring reduce-scatter, 7 remote DMAs per device"),
        Family("dma-pipeline", DMA, 100, "call", "local double-buffered HBM->VMEM->HBM (chunks sweep)"),
        Family("blockspec-add", GRID_STEP, 30, "per-op", "BlockSpec elementwise add (grid sweep)"),
        Family("matmul", GRID_STEP, 30, "per-op", "blocked 128^3-tile matmul (grid sweep)"),
        Family("semaphores", SEM_OP, 100, "call", "one core, signal/wait loop on a REGULAR semaphore"),
        Family("races", "call", 30, "call", "each family with detect_races=True (judged per case)"),
    ]
}


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    family: str
    devices: int
    ops: int  # operations of the family's unit per call
    build: Callable  # () -> (fn(interpret) -> jitted program, args)
    expect: Callable  # args as numpy -> expected output
    detect_races: bool = False
    # XLA's own equivalent (collectives): () -> jitted program taking the
    # same args, timed in the same loop as a third side ("XLA native").
    native: Callable | None = None

    @property
    def unit(self) -> str:
        return FAMILIES[self.family].unit


def _per_device(x: np.ndarray, n: int) -> list[np.ndarray]:
    return np.split(x, n)


def _ping_pong(rounds, races=False):
    return Case(
        f"ping-pong r={rounds}" + (" races" if races else ""),
        "races" if races else "ping-pong",
        2,
        4 * rounds,
        lambda: collectives.ping_pong(rounds),
        lambda x: x + rounds,
        races,
    )


def _right_permute(rows, races=False):
    n = 8
    return Case(
        f"right-permute 8dev {rows * 512 // 1024}KiB" + (" races" if races else ""),
        "races" if races else "right-permute",
        n,
        n,
        lambda: collectives.right_permute(n, rows),
        lambda x: np.concatenate(np.roll(np.array(_per_device(x, n)), 1, axis=0)),
        races,
        native=None if races else lambda: collectives.native_right_permute(n),
    )


def _all_gather(rows, races=False):
    n = 8
    return Case(
        f"all-gather 8dev {rows * 512 // 1024}KiB" + (" races" if races else ""),
        "races" if races else "all-gather",
        n,
        n * (n - 1),
        lambda: collectives.all_gather(n, rows),
        lambda x: np.concatenate([x] * n),
        races,
        native=None if races else lambda: collectives.native_all_gather(n),
    )


def _reduce_scatter(rows, races=False):
    n = 8

    def expect(x):
        by_device = x.reshape(n, n, rows, -1)  # (device, chunk, rows, lanes)
        return by_device.sum(axis=0).reshape(n * rows, -1)

    return Case(
        f"reduce-scatter 8dev {rows * 512 // 1024}KiB" + (" races" if races else ""),
        "races" if races else "reduce-scatter",
        n,
        n * (n - 1),
        lambda: collectives.reduce_scatter(n, rows),
        expect,
        races,
        native=None if races else lambda: collectives.native_reduce_scatter(n, rows),
    )


def _pipeline(chunks, races=False):
    return Case(
        f"dma-pipeline chunks={chunks}" + (" races" if races else ""),
        "races" if races else "dma-pipeline",
        1,
        2 * chunks,
        lambda: local.dma_pipeline(chunks),
        lambda x: x * 2 + 1,
        races,
    )


def _add(grid, races=False):
    return Case(
        f"blockspec-add grid={grid}" + (" races" if races else ""),
        "races" if races else "blockspec-add",
        1,
        grid,
        lambda: local.blockspec_add(grid),
        lambda x, y: x + y,
        races,
    )


def _matmul(blocks, races=False):
    return Case(
        f"matmul grid={blocks}^3" + (" races" if races else ""),
        "races" if races else "matmul",
        1,
        blocks**3,
        lambda: local.blocked_matmul(blocks),
        lambda a, b: a @ b,
        races,
    )


def _semaphores(iters, races=False):
    return Case(
        f"semaphores iters={iters}" + (" races" if races else ""),
        "races" if races else "semaphores",
        1,
        3 * iters,
        lambda: local.semaphore_loop(iters),
        lambda x: x + iters,
        races,
    )


def suite(quick: bool) -> list[Case]:
    if quick:
        cases = [_ping_pong(r) for r in (10, 100)]
        cases += [_right_permute(8), _all_gather(8), _reduce_scatter(8)]
        cases += [_pipeline(c) for c in (8, 64)]
        cases += [_add(g) for g in (8, 64)]
        cases += [_matmul(b) for b in (2, 3)]
        cases += [_semaphores(i) for i in (100, 1000)]
    else:
        cases = [_ping_pong(r) for r in (10, 100, 1000)]
        # Stock interpret mode deadlocks on 8 devices once a kernel buffer reaches
        # ~128 KiB (all device threads block in its allocation callback), so the
        # collectives stay at <= 64 KiB buffers.
        cases += [_right_permute(r) for r in (8, 128)]
        cases += [_all_gather(r) for r in (8, 16)]
        cases += [_reduce_scatter(r) for r in (8, 16)]
        cases += [_pipeline(c) for c in (8, 64, 512)]
        cases += [_add(g) for g in (8, 64, 512)]
        cases += [_matmul(b) for b in (2, 4, 6)]
        cases += [_semaphores(i) for i in (100, 1000, 10000)]
    # Stock race detection is quadratic in accesses: keep these small.
    cases += [
        _ping_pong(10, True),
        _right_permute(8, True),
        _all_gather(8, True),
        _reduce_scatter(8, True),
        _pipeline(8, True),
        _add(8, True),
        _matmul(2, True),
        _semaphores(100, True),
    ]
    return cases
