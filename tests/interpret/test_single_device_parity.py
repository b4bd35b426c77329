"""Single-device parity: mosaic_rt.InterpretParams vs stock pltpu.InterpretParams.

`test_stock_runs` runs every corpus case under stock only and checks it does
what the case says (matches its numpy reference, or raises the expected
error): it proves the corpus is valid and runs today. Every other test
compares ours with stock; a mosaic_rt that cannot be imported fails the
suite at collection.
"""

from __future__ import annotations

import dataclasses

import jax
import mosaic_rt
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from kernels.single_device import CASES, CASES_BY_NAME
from parity import assert_bitwise_equal, assert_same_error, run_case, split_stock_error

# A broken build must fail these suites at collection, never skip them.
OursParams = mosaic_rt.InterpretParams

DMA_MODES = ("eager", "on_wait")
CASE_IDS = [c.name for c in CASES]


def _knobs(dma_mode):
    # detect_races stays False until our race detector is compared too.
    return dict(dma_execution_mode=dma_mode, detect_races=False)


def _stock(**knobs):
    return dataclasses.replace(pltpu.InterpretParams(), **knobs)


def _ours(**knobs):
    return dataclasses.replace(OursParams(), **knobs)


def _assert_matches_reference(case, out):
    want = case.reference(*case.args)
    is_leaf = lambda x: x is None  # noqa: E731 - None marks "not checked"
    got_leaves = jax.tree.leaves(out, is_leaf=is_leaf)
    want_leaves = jax.tree.leaves(want, is_leaf=is_leaf)
    assert len(got_leaves) == len(want_leaves), (len(got_leaves), len(want_leaves))
    for i, (got, exp) in enumerate(zip(got_leaves, want_leaves)):
        if exp is None:
            continue
        exp = np.asarray(exp).astype(got.dtype)
        assert got.shape == exp.shape, f"leaf {i}: {got.shape} vs {exp.shape}"
        if np.issubdtype(got.dtype, np.floating) or got.dtype.name == "bfloat16":
            got, exp = got.astype(np.float32), exp.astype(np.float32)
        np.testing.assert_array_equal(got, exp, err_msg=f"leaf {i}")


def _assert_expected_error(case, result):
    assert isinstance(result, Exception), f"{case.name}: expected an error containing {case.expect_error!r}"
    _, message = split_stock_error(result)
    assert case.expect_error in message, f"{case.name}: expected {case.expect_error!r} in: {message}"


# --------------------------------------------------------------------------
# Stock only: the corpus is valid (runs today).
# --------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_stock_runs(case):
    results = {m: run_case(case, _stock(**_knobs(m))) for m in DMA_MODES}
    for mode, result in results.items():
        if case.expect_error is not None:
            _assert_expected_error(case, result)
            continue
        if isinstance(result, Exception):
            raise AssertionError(f"{case.name} [{mode}] failed under stock") from result
        if case.reference is not None:
            _assert_matches_reference(case, result)
    if case.expect_error is not None:
        return
    if case.mode_dependent:
        # The knob must really change something here, or the case is useless.
        with pytest.raises(AssertionError):
            assert_bitwise_equal(results["eager"], results["on_wait"])
    else:
        # These kernels wait for every DMA before using its data, so the DMA
        # mode must not change any result.
        assert_bitwise_equal(results["eager"], results["on_wait"], "eager vs on_wait")


def test_corpus_is_large_and_covers_errors():
    assert len(CASES) >= 30
    assert sum(c.expect_error is not None for c in CASES) >= 3


# --------------------------------------------------------------------------
# The comparison helpers themselves.
# --------------------------------------------------------------------------


def test_bitwise_equal_compares_bits_not_values():
    nan = np.array([np.nan], np.float32)
    assert_bitwise_equal({"a": nan}, {"a": nan.copy()})
    other_nan = nan.view(np.uint32) ^ np.uint32(1)  # still a NaN, other payload
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_bitwise_equal(nan, other_nan.view(np.float32))
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_bitwise_equal(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    with pytest.raises(AssertionError, match="dtype"):
        assert_bitwise_equal(np.zeros(2, np.int32), np.zeros(2, np.uint32))
    with pytest.raises(AssertionError, match="shape"):
        assert_bitwise_equal(np.zeros(2), np.zeros((2, 1)))
    with pytest.raises(AssertionError, match="structure"):
        assert_bitwise_equal((np.zeros(2),), [np.zeros(2)])


@pytest.mark.timeout(120)
def test_same_error_rule_on_a_real_stock_error():
    stock = run_case(CASES_BY_NAME["error_oob_read_raise"], _stock())
    name, text = split_stock_error(stock)
    assert name == "IndexError" and text.startswith("Out-of-bounds read of")
    assert_same_error(stock, stock)  # ours may also be a JaxRuntimeError
    assert_same_error(stock, IndexError(f"kernel failed: {text}"))

    class OurIndexError(IndexError):
        pass

    assert_same_error(stock, OurIndexError(text))  # subclasses are fine
    with pytest.raises(AssertionError, match="stock raised IndexError"):
        assert_same_error(stock, ValueError(text))
    with pytest.raises(AssertionError, match="not found"):
        assert_same_error(stock, IndexError("Out-of-bounds read"))


# --------------------------------------------------------------------------
# Ours vs stock.
# --------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dma_mode", DMA_MODES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_parity(case, dma_mode):
    knobs = _knobs(dma_mode)
    stock = run_case(case, _stock(**knobs))
    ours = run_case(case, _ours(**knobs))
    if isinstance(stock, Exception):
        if not isinstance(ours, Exception):
            _, text = split_stock_error(stock)
            pytest.fail(f"stock raised ({text!r}) but ours returned normally")
        if case.ours_error is not None:
            assert case.ours_error in str(ours), f"expected {case.ours_error!r} in our error: {ours!r}"
        else:
            assert_same_error(stock, ours)
        return
    if isinstance(ours, Exception):
        raise AssertionError("stock ran but ours raised") from ours
    if case.ours_check is not None:
        case.ours_check(ours)
        return
    assert_bitwise_equal(stock, ours)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["add_2d", "manual_double_buffer_dma", "regular_semaphore"])
def test_lowered_program_uses_native_calls(name):
    case = CASES_BY_NAME[name]
    params = _ours()
    text = jax.jit(lambda *a: case.fn(params, *a)).lower(*case.args).as_text()
    assert "mosaic_rt_" in text, "no mosaic_rt_ custom call in the lowered program"
    assert "callback" not in text, "the lowered program still uses a Python callback"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("failing", ["error_oob_read_raise", "error_revisited_output_block", "error_oob_masked_store"])
def test_next_kernel_runs_after_error_without_reset(failing):
    # No reset_tpu_interpret_mode_state() between the failing kernel and the
    # next ones: a failure must leave nothing behind.
    params = _ours()
    assert isinstance(run_case(CASES_BY_NAME[failing], params), Exception)
    for name in ("add_2d", "manual_double_buffer_dma", "regular_semaphore"):
        case = CASES_BY_NAME[name]
        out = run_case(case, params)
        if isinstance(out, Exception):
            raise AssertionError(f"{name} failed after {failing}") from out
        _assert_matches_reference(case, out)
