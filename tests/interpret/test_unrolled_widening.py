"""Column work that Python unrolled (``for off in range(0, 128, 8): ...
ref[r, pl.ds(c + off, 8)] ...``) runs as one copy over all its columns
(`interpret/rewrites/unrolled.py`), as ragged_scatter's bf16 unpacking does.
Results equal stock's bit for bit (and ours with the rewrite off, float
chains included); copies that could see each other's work, overlap or use
ops XLA may compute differently at another width keep their copies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.interpret.rewrites import unrolled, widening

pytestmark = pytest.mark.timeout(180)

_ROWS, _COLS, _CHUNK, _LANES = 4, 256, 128, 8


def _call(kernel, x, s, params):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        interpret=params,
    )(s, x)


def _ours(kernel, x, s, *, widen: bool, monkeypatch, mode="eager", races=False):
    """``(output, copies widened)`` on mosaic_rt, the rewrite on or off."""
    real = widening.widen_copies
    widened = []

    def spy(*a):
        result = real(*a) if widen else None
        widened.append(result is not None)
        return result

    monkeypatch.setattr(widening, "widen_copies", spy)
    unrolled._CACHE.clear()  # a jaxpr rewritten with the other setting
    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=races)
    out = np.asarray(jax.block_until_ready(jax.jit(lambda s, x: _call(kernel, x, s, params))(s, x)))
    unrolled._CACHE.clear()
    return out, sum(widened)


def _stock(kernel, x, s, mode="eager"):
    params = pltpu.InterpretParams(dma_execution_mode=mode)
    return np.asarray(jax.block_until_ready(jax.jit(lambda s, x: _call(kernel, x, s, params))(s, x)))


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8)


def _inputs(dtype):
    rng = np.random.default_rng(11)
    if dtype == np.uint32:
        x = rng.integers(0, 2**32, (_ROWS, _COLS), dtype=np.uint64).astype(np.uint32)
    else:  # random bits: NaNs, infinities, subnormals among them
        x = rng.integers(0, 2**32, (_ROWS, _COLS), dtype=np.uint64).astype(np.uint32).view(np.float32)
    s = np.array([0, 16, 3, 16], np.int32)  # s[0] = 0: a traced column base
    return jnp.asarray(x), jnp.asarray(s)


def _unpack_kernel(s_ref, x_ref, o_ref):
    """ragged_scatter's shape: per 128 columns, 16 unrolled copies of 8
    lanes; per row a shift by a per-row scalar, a mask, and a merge with
    the previous row's result where a scalar says so."""
    o_ref[...] = x_ref[...]

    @pl.loop(0, _COLS, step=_CHUNK)
    def _(c):
        for off in range(0, _CHUNK, _LANES):
            cols = pl.ds(c + off, _LANES)
            prev = None
            for r in range(_ROWS):
                v = o_ref[r, cols]
                v = jnp.bitwise_and(jnp.right_shift(v, s_ref[r].astype(jnp.uint32)), jnp.uint32(0xFFFF))
                v = jnp.left_shift(v, (16 - s_ref[r]).astype(jnp.uint32))
                if prev is not None:
                    v = jnp.where(s_ref[r] == s_ref[r - 1], jnp.bitwise_or(prev, v), v)
                o_ref[r, cols] = v
                prev = v


def _float_kernel(s_ref, x_ref, o_ref):
    """Float chains per copy: scale, add, compare and select."""
    o_ref[...] = x_ref[...]

    @pl.loop(0, _COLS, step=_CHUNK)
    def _(c):
        for off in range(0, _CHUNK, _LANES):
            cols = pl.ds(c + off, _LANES)
            for r in range(_ROWS):
                v = o_ref[r, cols]
                w = s_ref[r].astype(jnp.float32) * 0.5
                v = jnp.where(v > 1.0, v * w + 2.0, v - w)
                o_ref[r, cols] = v


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_unrolled_unpacking_runs_as_one_copy_equal_to_stock(mode, monkeypatch):
    x, s = _inputs(np.uint32)
    wide, n = _ours(_unpack_kernel, x, s, widen=True, monkeypatch=monkeypatch, mode=mode)
    assert n >= 1, "the 16 copies were not widened"
    np.testing.assert_array_equal(_bits(wide), _bits(_stock(_unpack_kernel, x, s, mode)))
    copies, n_off = _ours(_unpack_kernel, x, s, widen=False, monkeypatch=monkeypatch, mode=mode)
    assert n_off == 0
    np.testing.assert_array_equal(_bits(wide), _bits(copies))


def test_unrolled_unpacking_with_race_detection(monkeypatch):
    x, s = _inputs(np.uint32)
    wide, n = _ours(_unpack_kernel, x, s, widen=True, monkeypatch=monkeypatch, races=True)
    assert n >= 1
    np.testing.assert_array_equal(_bits(wide), _bits(_stock(_unpack_kernel, x, s)))


def test_unrolled_float_chains_are_bit_equal_to_the_copies(monkeypatch):
    x, s = _inputs(np.float32)
    wide, n = _ours(_float_kernel, x, s, widen=True, monkeypatch=monkeypatch)
    assert n >= 1
    copies, _ = _ours(_float_kernel, x, s, widen=False, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(_bits(wide), _bits(copies))


def _overlapping(s_ref, x_ref, o_ref):
    # Slices of 16 lanes 8 apart: each copy rewrites half of the last one's.
    o_ref[...] = x_ref[...]
    for off in range(0, _CHUNK - 8, 8):
        cols = pl.ds(s_ref[0] + off, 16)
        o_ref[0, cols] = o_ref[0, cols] + jnp.uint32(1)


def _reads_whole_rows(s_ref, x_ref, o_ref):
    # Each copy reads the whole row it writes: later copies see earlier work.
    o_ref[...] = x_ref[...]
    for off in range(0, _CHUNK, 8):
        cols = pl.ds(s_ref[0] + off, 8)
        o_ref[1, cols] = o_ref[1, cols] + o_ref[1, :][0]


def _carries_across_copies(s_ref, x_ref, o_ref):
    # A running sum threads through the copies.
    o_ref[...] = x_ref[...]
    acc = jnp.zeros((8,), jnp.uint32)
    for off in range(0, _CHUNK, 8):
        cols = pl.ds(s_ref[0] + off, 8)
        acc = acc + o_ref[2, cols]
        o_ref[2, cols] = acc


def _transcendental(s_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]
    for off in range(0, _CHUNK, 8):
        cols = pl.ds(s_ref[0] + off, 8)
        o_ref[3, cols] = jnp.exp(o_ref[3, cols])


@pytest.mark.parametrize(
    ("kernel", "dtype"),
    [
        (_overlapping, np.uint32),
        (_reads_whole_rows, np.uint32),
        (_carries_across_copies, np.uint32),
        (_transcendental, np.float32),
    ],
)
def test_copies_that_could_differ_keep_their_copies(kernel, dtype, monkeypatch):
    x, s = _inputs(dtype)
    if dtype == np.float32:
        x = jnp.asarray(np.linspace(-3, 3, _ROWS * _COLS, dtype=np.float32).reshape(_ROWS, _COLS))
    out, n = _ours(kernel, x, s, widen=True, monkeypatch=monkeypatch)
    assert n == 0, "copies that could see each other's work were widened"
    if dtype == np.uint32:
        np.testing.assert_array_equal(_bits(out), _bits(_stock(kernel, x, s)))
    else:
        copies, _ = _ours(kernel, x, s, widen=False, monkeypatch=monkeypatch)
        np.testing.assert_array_equal(_bits(out), _bits(copies))
