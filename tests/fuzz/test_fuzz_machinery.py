"""The fuzzer's own parts (tests/support/fuzzing): the oracle's verdicts, the
shrinker, case sources and their standalone repro files, generation being
reproducible from a seed."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from fuzzing import case, categories, oracle, runner
from fuzzing.shrink import shrink
from jax.experimental.pallas import tpu as pltpu

_WRAPPED = np.asarray([44, -56], np.int8)  # 100 * 3 and 100 * 10, wrapped (the TPU's int8)
_SATURATED = np.asarray([127, 127], np.int8)  # what a saturating multiply gives


def _case(stock, ours, meaning=None):
    """A loaded case's namespace whose run gives ``stock`` under stock's
    params and ``ours`` under ours (an exception instance: raised)."""

    def run(params):
        out = stock if type(params) is pltpu.InterpretParams else ours
        if isinstance(out, Exception):
            raise out
        return [out]

    def meaning_fn():
        if isinstance(meaning, Exception):
            raise meaning
        return None if meaning is None else [meaning]

    return {"KNOBS": {}, "run": run, "meaning": meaning_fn}


def test_identical_outputs_are_the_same():
    assert oracle.judge(_case(_WRAPPED, _WRAPPED.copy())).kind == oracle.SAME


def test_stock_wrong_where_ours_is_the_meaning():
    # Issue 56: stock's fused int8 multiply saturated, the TPU wraps.
    v = oracle.judge(_case(_SATURATED, _WRAPPED, meaning=_WRAPPED))
    assert v.kind == oracle.STOCK_WRONG, v
    assert "stock is not the meaning" in v.detail


def test_a_difference_where_stock_is_the_meaning_is_a_mismatch():
    v = oracle.judge(_case(_WRAPPED, _SATURATED, meaning=_WRAPPED))
    assert v.kind == oracle.MISMATCH and v.signature == ("differs", "")
    # ... and so is one without a meaning to decide it.
    assert oracle.judge(_case(_WRAPPED, _SATURATED)).kind == oracle.MISMATCH


def test_rejections():
    boom = ValueError("no")
    assert oracle.judge(_case(boom, ValueError("no"))).kind == oracle.BOTH_REJECT
    v = oracle.judge(_case(_WRAPPED, TypeError("reshape requires ndarray")))
    assert v.kind == oracle.MISMATCH and v.signature == ("ours_rejects", "TypeError")
    assert oracle.judge(_case(boom, _WRAPPED, meaning=_WRAPPED)).kind == oracle.STOCK_REJECTS
    v = oracle.judge(_case(boom, _SATURATED, meaning=_WRAPPED))
    assert v.kind == oracle.MISMATCH and v.signature == ("ours_wrong", "")


def test_bits_decide_but_the_meaning_takes_any_nan():
    nan_a = np.asarray([np.nan], np.float32)
    nan_b = np.asarray([0x7FC00001], np.uint32).view(np.float32)  # another NaN payload
    assert oracle.judge(_case(nan_a, nan_b)).kind == oracle.MISMATCH  # stock vs ours: bit for bit
    assert oracle.judge(_case(nan_a, nan_b, meaning=nan_b)).kind == oracle.MISMATCH
    assert oracle.matches_meaning([nan_b], [nan_a])  # the meaning: any NaN is a NaN
    zero, negzero = np.asarray([0.0], np.float32), np.asarray([-0.0], np.float32)
    assert not oracle.matches_meaning([zero], [negzero])  # but -0.0 is not 0.0


def test_a_meaning_that_raises_is_reported():
    v = oracle.judge(_case(ValueError("x"), _WRAPPED, meaning=KeyError("model")))
    assert v.kind == oracle.MEANING_ERROR and "KeyError" in v.detail


@dataclasses.dataclass(frozen=True)
class _Numbers:
    items: tuple

    def shrinks(self):
        for k in range(len(self.items)):
            yield _Numbers(self.items[:k] + self.items[k + 1 :])


def test_shrinking_keeps_the_failure_and_drops_the_rest():
    # Fails while it holds both 3 and 7.
    small, runs = shrink(_Numbers(tuple(range(10))), lambda s: {3, 7} <= set(s.items))
    assert small.items == (3, 7) and runs <= 120


def test_generation_is_reproducible_from_the_seed():
    for category in categories.NAMES:
        a, b = runner.generate(category, 12345), runner.generate(category, 12345)
        assert a == b, category
        assert case.source(a, title="t") == case.source(b, title="t")


@pytest.mark.parametrize("category", ["elementwise", "dma"])
def test_a_repro_file_runs_on_its_own(category, tmp_path):
    spec = runner.generate(category, 7)
    path = runner.write_repro(case.source(spec, title=runner.title(category, 7)), str(tmp_path), category, 7)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bit-identical outputs: [True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_excess_precision_where_stock_rejects_is_not_a_mismatch():
    # Seed 304000097 (jax 0.12.1): stock rejected the kernel (a store
    # through a bitcast view); ours differed from the meaning only where
    # XLA:CPU fused a bf16 multiply and kept it in f32 (stock's programs do
    # the same: without the rejected line stock and ours agree bit for bit).
    # Compiled without excess precision, ours is the meaning.
    import jax
    import jax.numpy as jnp
    import mosaic_rt
    from jax.experimental import pallas as pl

    x = (np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 7.0 + 0.3).astype(jnp.bfloat16)

    def kernel(x_ref, o_ref):
        v = x_ref[...]
        u = jnp.where(x_ref[...] > 50, v, v * 3)
        o_ref[...] = (u * u).astype(jnp.float32)

    def run(params):
        if type(params) is pltpu.InterpretParams:
            raise NotImplementedError("stock rejects it")
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=params)(x)

    def meaning():
        v = np.asarray(x)
        u = np.where(v > 50, v, (v * np.asarray(3, v.dtype)).astype(v.dtype))
        return [(u * u).astype(v.dtype).astype(np.float32)]

    ns = {"KNOBS": {}, "run": run, "meaning": meaning}
    fused = np.asarray(run(mosaic_rt.InterpretParams()))
    v = oracle.judge(ns)
    assert v.kind == oracle.STOCK_REJECTS
    assert not np.array_equal(fused, meaning()[0])  # the fused program keeps f32 intermediates
    assert v.off_meaning


def test_xla_rewriting_a_division_where_stock_rejects_is_not_a_mismatch():
    # Seed 305001054 (jax 0.12.1): stock rejected a vmapped kernel with
    # dimension_semantics; ours computed x / -7.25 as that jaxlib's XLA
    # compiles it, x * (1 / -7.25), one ulp off eager jax's division in 532
    # elements (jaxlib 0.10.2's XLA divides). The meaning under jax.jit is
    # ours bit for bit: a second opinion the oracle takes where a case has
    # one, and only then.
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    divided = x / np.float32(-7.25)
    rewritten = x * (np.float32(1) / np.float32(-7.25))
    assert not np.array_equal(divided, rewritten)
    ns = _case(ValueError("stock rejects it"), rewritten, meaning=divided)
    v = oracle.judge(ns)
    assert v.kind == oracle.MISMATCH and v.signature == ("ours_wrong", ""), v
    ns["compiled_meaning"] = lambda: [rewritten.copy()]
    v = oracle.judge(ns)
    assert v.kind == oracle.STOCK_REJECTS and v.off_meaning, v
    # A compiled meaning that is not ours does not excuse it.
    ns["compiled_meaning"] = lambda: [divided.copy()]
    assert oracle.judge(ns).kind == oracle.MISMATCH


def test_a_subnormal_xla_folded_where_the_meaning_has_zero_is_not_a_mismatch():
    # Seed 308002089 (jax 0.12.1): `(where(m, x, 0) + 1e-40).astype(bf16)`
    # after a masked load stock rejects. XLA folds the constant 0 + 1e-40
    # without flushing it, so ours (and plain jax.jit) keep a bf16 subnormal
    # where eager jax and a TPU flush it to zero.
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    meaning = np.asarray([3.0, -1.5, 0.0, -0.0], bf16)
    ours = meaning.copy()
    ours[2] = np.asarray([1e-40], np.float32).astype(bf16)[0]
    ours[3] = -ours[2]
    assert ours.view(np.uint16)[2] == 1
    v = oracle.judge(_case(ValueError("stock rejects it"), ours, meaning=meaning))
    assert v.kind == oracle.STOCK_REJECTS and v.off_meaning, v
    # Only subnormals against zeros: a normal number off the meaning, or a
    # subnormal where the meaning has another number, is still ours wrong.
    for k, value in ((2, 1.0), (0, 1e-40)):
        wrong = meaning.copy()
        wrong[k] = np.asarray([value], np.float32).astype(bf16)[0]
        v = oracle.judge(_case(ValueError("stock rejects it"), wrong, meaning=meaning))
        assert v.kind == oracle.MISMATCH and v.signature == ("ours_wrong", ""), (k, v)


def test_generated_scalar_kernels_cast_no_float_constant_beyond_the_integers():
    # Seed 309001946 (jax 0.10.2): `jnp.float32(inf).astype(jnp.int32)`. jax
    # folds a cast of a constant while tracing, with numpy, where inf, NaN
    # or a float out of range gives an undefined integer (INT_MIN on x86,
    # with a warning): stock and ours both ran that folded constant, the
    # eager meaning (and XLA, and a TPU) saturates to INT_MAX. Such a cast is
    # undefined behaviour of the kernel, not a thing to judge interpreters by.
    import re

    casts = re.compile(r"jnp\.float32\(([^()]*(?:\([^()]*\))?)\)\)?\.astype\(jnp\.u?int32\)")
    seen = 0
    for seed in range(910_000_000, 910_000_300):
        text = runner.generate("scalar", seed).render()
        for literal in casts.findall(text):
            seen += 1
            value = float(eval(literal))  # a Python float literal of the generator's
            assert -1 < value < 2**31 and value == value, (seed, literal)
    assert seen > 20  # the generator still casts float constants


def test_generated_grid_kernels_write_their_whole_output():
    # Rows no output block covers hold whatever the TPU (or an interpreter)
    # left there: the grid generator gave a squeezed leading output dim the
    # unsqueezed block's rows, which stock and ours filled alike and the
    # numpy meaning with zeros (found once RevisitMode.ANY cases let the
    # meaning decide).
    from fuzzing.grid import _block_dim_size

    for seed in range(900_000_000, 900_000_400):
        spec = runner.generate("grid", seed)
        out = spec.output
        for d, (size, index) in enumerate(zip(out.block, out.index_map.split(", "))):
            steps = 1 if index == "0" else spec.grid[int(index[1:])]
            assert _block_dim_size(size) * steps == out.array[d], (seed, out)
