"""Timing one case: stock and mosaic_rt interpret mode, interleaved, same process.

First calls (trace + compile + run) are timed once each; then repetitions
alternate stock/ours until each side has used its time budget or hit its
repetition cap. Outputs are compared as raw bytes, first call and last call.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import traceback

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu

import mosaic_rt
from mosaic_rt.bench.suite import Case


@dataclasses.dataclass(frozen=True)
class Budget:
    seconds_per_side: float
    min_reps: int
    max_reps_stock: int
    max_reps_ours: int
    case_timeout_s: float  # a case still running after this is hung: abort
    # The rows of `mosaic_rt.bench.rows`.
    cold_reps: int = 2  # cold first calls per side per family
    suite_passes: int = 1  # passes over the 44 zoo kernels (fresh shapes each)
    launch_mib: tuple = (0.25, 1.0, 4.0)
    launch_reps_ours: int = 10  # per size; numpy copies get as many
    launch_reps_stock: int = 2
    lowering_reps: int = 2
    memory_kernels: int = 6  # distinct splash kernels per side in the memory row
    row_timeout_s: float = 900  # a row still running after this is hung: abort


QUICK = Budget(seconds_per_side=0.3, min_reps=2, max_reps_stock=5, max_reps_ours=100, case_timeout_s=120)
FULL = Budget(
    seconds_per_side=2.0,
    min_reps=3,
    max_reps_stock=20,
    max_reps_ours=1000,
    case_timeout_s=600,
    cold_reps=4,
    suite_passes=2,
    launch_mib=(0.25, 0.5, 1.0, 2.0, 4.0, 8.0),
    launch_reps_ours=30,
    launch_reps_stock=3,
    lowering_reps=4,
    memory_kernels=24,
    row_timeout_s=3000,
)


@dataclasses.dataclass
class SideResult:
    first_s: float
    times_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)


@dataclasses.dataclass
class CaseResult:
    case: Case
    stock: SideResult | None = None
    ours: SideResult | None = None
    native: SideResult | None = None  # XLA's own collective (cases that have one)
    native_correct: bool | None = None  # native output vs the numpy reference
    equal: bool | None = None  # stock vs ours, raw bytes
    correct: bool | None = None  # stock output vs the numpy reference
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.stock and self.ours:
            return self.stock.median_s / self.ours.median_s
        return None

    @property
    def ours_over_native(self) -> float | None:
        """ours median / XLA native median (lower is better; 1.0 = XLA's speed)."""
        if self.ours and self.native:
            return self.ours.median_s / self.native.median_s
        return None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.equal) and bool(self.correct) and self.native_correct is not False


def interpret_params(detect_races: bool):
    """The two parameter sets compared: stock defaults vs ours with the same knobs."""
    return (
        pltpu.InterpretParams(detect_races=detect_races),
        mosaic_rt.InterpretParams(detect_races=detect_races, wait_timeout=60.0),
    )


def _timed_call(fn, args) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - start, np.asarray(out)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def run_case(case: Case, budget: Budget) -> CaseResult:
    result = CaseResult(case)
    try:
        program, args = case.build()
        stock_params, our_params = interpret_params(case.detect_races)
        stock_fn, our_fn = program(stock_params), program(our_params)
        stock_first, stock_out = _timed_call(stock_fn, args)
        ours_first, ours_out = _timed_call(our_fn, args)
        result.equal = _same_bytes(stock_out, ours_out)
        expected = np.asarray(case.expect(*[np.asarray(a) for a in args]), dtype=stock_out.dtype)
        result.correct = _same_bytes(stock_out, expected.reshape(stock_out.shape))
        native_fn = case.native() if case.native is not None else None
        if native_fn is not None:
            native_first, native_out = _timed_call(native_fn, args)
            result.native_correct = _same_bytes(native_out, expected.reshape(native_out.shape))
        stock_times, ours_times, native_times = [], [], []
        while True:
            stock_done = len(stock_times) >= budget.min_reps and (
                sum(stock_times) >= budget.seconds_per_side or len(stock_times) >= budget.max_reps_stock
            )
            ours_done = len(ours_times) >= budget.min_reps and (
                sum(ours_times) >= budget.seconds_per_side or len(ours_times) >= budget.max_reps_ours
            )
            if stock_done and ours_done:
                break
            if not stock_done:
                t, stock_out = _timed_call(stock_fn, args)
                stock_times.append(t)
            if not ours_done:
                # XLA native (if any) gets ours' budget, paired with ours in
                # alternating order so neither always runs on a warmer cache.
                native_first_now = native_fn is not None and len(ours_times) % 2 == 1
                if native_first_now:
                    native_times.append(_timed_call(native_fn, args)[0])
                t, ours_out = _timed_call(our_fn, args)
                ours_times.append(t)
                if native_fn is not None and not native_first_now:
                    native_times.append(_timed_call(native_fn, args)[0])
        result.equal = result.equal and _same_bytes(stock_out, ours_out)
        result.stock = SideResult(stock_first, stock_times)
        result.ours = SideResult(ours_first, ours_times)
        if native_fn is not None:
            result.native = SideResult(native_first, native_times)
    except Exception as e:  # noqa: BLE001 - one failing case must not stop the suite
        lines = traceback.format_exception_only(type(e), e)
        result.error = "".join(lines).strip().splitlines()[-1][:400]
    return result


def warm_up() -> None:
    """Runs a trivial kernel under both interpreters so one-time set-up (imports,
    FFI registration, jit caches) is not charged to the first case."""
    from mosaic_rt.bench import local

    program, args = local.blockspec_add(1)
    for params in interpret_params(False):
        jax.block_until_ready(program(params)(*args))
