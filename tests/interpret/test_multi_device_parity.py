"""Multi-device / multi-core parity: mosaic_rt.InterpretParams vs stock.

`test_stock_runs` runs every case of tests/support/kernels/multi_device.py under stock
`pltpu.InterpretParams` only and checks its numpy reference: the corpus is
valid and runs today. `test_parity` compares stock with ours bit for bit for
each DMA execution mode and race-detection setting (a mosaic_rt that cannot
be imported fails the suite at collection). A multi-core case may skip
while ours still reports "several cores per device" as not implemented;
every other failure fails.
"""

from __future__ import annotations

import dataclasses

import jax
import mosaic_rt
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from kernels.multi_device import CASES, CASES_BY_NAME, MULTI_CORE, SWEEP_16_DEVICES
from parity import assert_bitwise_equal, run_case

# A broken build must fail these suites at collection, never skip them.
OursParams = mosaic_rt.InterpretParams

DMA_MODES = ("eager", "on_wait")
# Ours also runs the default, "tpu"; stock, which has no such mode, is
# compared in its "on_wait" (every corpus kernel waits before it reads).
OUR_DMA_MODES = (*DMA_MODES, "tpu")
STOCK_MODE = {"eager": "eager", "on_wait": "on_wait", "tpu": "on_wait"}
CASE_IDS = [c.name for c in CASES]
# Bounds every blocking wait of ours, so a broken kernel fails instead of hanging.
_OUR_WAIT_TIMEOUT = 30.0


def _stock(**knobs):
    return dataclasses.replace(pltpu.InterpretParams(), **knobs)


def _ours(**knobs):
    return dataclasses.replace(OursParams(wait_timeout=_OUR_WAIT_TIMEOUT), **knobs)


def _assert_matches_reference(case, out):
    want = np.asarray(case.reference(*case.args))
    got = np.asarray(out)
    assert got.shape == want.shape, f"{case.name}: shape {got.shape} vs {want.shape}"
    np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=case.name)


def _parity_params(cases):
    return [
        pytest.param(case, mode, races, id=f"{case.name}-{mode}-races{int(races)}")
        for case in cases
        for mode in OUR_DMA_MODES
        for races in (False, True)
    ]


def _is_multi_core_not_supported(exc: BaseException) -> bool:
    return isinstance(exc, NotImplementedError) and "several cores per device" in str(exc)


# --------------------------------------------------------------------------
# Stock only: the corpus is valid (runs today).
# --------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_stock_runs(case):
    results = {m: run_case(case, _stock(dma_execution_mode=m)) for m in DMA_MODES}
    for mode, result in results.items():
        if isinstance(result, Exception):
            raise AssertionError(f"{case.name} [{mode}] failed under stock") from result
        _assert_matches_reference(case, result)
    # Every case waits for its DMAs before using the data.
    assert_bitwise_equal(results["eager"], results["on_wait"], "eager vs on_wait")


def test_corpus_covers_the_brief():
    assert len(CASES) >= 15
    assert len(MULTI_CORE) >= 4 and MULTI_CORE <= set(CASES_BY_NAME)
    for name in (
        "right_permute",
        "all_gather_ring",
        "all_reduce_sum",
        "reduce_scatter_sum",
        "reduce_scatter_emit_pipeline",
        "semaphore_ping_pong",
        "all_to_all",
        "barrier_only",
        "two_kernels_one_jit",
        "cores_wait_on_each_other",
    ):
        assert name in CASES_BY_NAME, name
    assert all(c.reference is not None for c in CASES)


# --------------------------------------------------------------------------
# Ours vs stock.
# --------------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case, dma_mode, detect_races", _parity_params(CASES))
def test_parity(case, dma_mode, detect_races):
    _check_parity(case, dma_mode, detect_races)


# The bigger sweep: the ring collectives on all 16 devices (`-m slow`).


@pytest.mark.slow
@pytest.mark.parametrize("case", SWEEP_16_DEVICES, ids=[c.name for c in SWEEP_16_DEVICES])
def test_stock_runs_16_devices(case):
    test_stock_runs(case)


@pytest.mark.slow
@pytest.mark.parametrize("case, dma_mode, detect_races", _parity_params(SWEEP_16_DEVICES))
def test_parity_16_devices(case, dma_mode, detect_races):
    _check_parity(case, dma_mode, detect_races)


def _check_parity(case, dma_mode, detect_races):
    knobs = dict(dma_execution_mode=dma_mode, detect_races=detect_races)
    ours = run_case(case, _ours(**knobs))
    if case.name in MULTI_CORE and _is_multi_core_not_supported(ours):
        pytest.skip(str(ours))
    if isinstance(ours, Exception):
        raise AssertionError(f"{case.name}: ours raised") from ours
    stock = run_case(case, _stock(**{**knobs, "dma_execution_mode": STOCK_MODE[dma_mode]}))
    if isinstance(stock, Exception):
        raise AssertionError(f"{case.name}: stock raised") from stock
    assert_bitwise_equal(stock, ours)
    _assert_matches_reference(case, ours)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["right_permute", "barrier_only", "all_to_all"])
def test_lowered_program_uses_native_calls(name):
    case = CASES_BY_NAME[name]
    params = _ours()
    text = jax.jit(lambda *a: case.fn(params, *a)).lower(*case.args).as_text()
    assert "mosaic_rt_" in text, "no mosaic_rt_ custom call in the lowered program"
    assert "callback" not in text, "the lowered program still uses a Python callback"
