"""A counted loop's loop-invariant integer work runs once before it
(`interpret/rewrites/hoisting.py`): per-row shifts and destinations that unrolled
SparseCore kernels compute from vectors loaded before a `pl.loop` no
longer cost a scalar program and an XLA slice per row on every trip.
Results stay stock's bit for bit; floats, the counter's work, memory
accesses and broadcasts stay in the loop."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.rewrites import hoisting
from mosaic_rt.interpret.rewrites.inlining import inline_calls
from parity import assert_bitwise_equal, run_case

pytestmark = pytest.mark.timeout(120)

_ROWS, _LANES, _TRIPS = 8, 16, 4


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _same_as_stock(fn, *args):
    case = _Case(fn, *args)
    stock = run_case(case, pltpu.InterpretParams())
    ours = run_case(case, mosaic_rt.InterpretParams())
    assert not isinstance(stock, BaseException), stock
    assert not isinstance(ours, BaseException), ours
    assert_bitwise_equal(stock, ours)
    return ours


def _kernel(idx_ref, x_ref, scale_ref, o_ref):
    idx = idx_ref[...]  # loaded once, before the loop
    scale = scale_ref[0]

    @pl.loop(0, _TRIPS * _LANES, step=_LANES)
    def _(col):
        cols = pl.ds(col, _LANES)
        for r in range(_ROWS):
            shift = jnp.remainder(idx[r], 2) * 16  # invariant: moves out
            dest = jnp.where(idx[r] > 3, idx[r] // 2, r)  # invariant: moves out
            data = jnp.right_shift(x_ref[r, cols], shift) & 0xFFFF
            o_ref[r, cols] = data * (dest + 1) + col  # reads the counter: stays
        o_ref[0, cols] = (o_ref[0, cols].astype(jnp.float32) * scale).astype(jnp.int32)


def _fn(params, idx, x, scale):
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((_ROWS, _TRIPS * _LANES), jnp.int32),
        in_specs=[
            pl.BlockSpec(memory_space=pltpu.VMEM),
            pl.BlockSpec(memory_space=pltpu.VMEM),
            pl.BlockSpec(memory_space=pltpu.SMEM),
        ],
        interpret=params,
    )(idx, x, scale)


_IDX = np.array([5, 0, 7, 2, 9, 1, 4, 3], np.int32)
_X = np.random.default_rng(1).integers(0, 2**31 - 1, (_ROWS, _TRIPS * _LANES), dtype=np.int64).astype(np.int32)
_SCALE = np.array([1.75], np.float32)


def _expected():
    out = np.zeros_like(_X)
    for col in range(0, _TRIPS * _LANES, _LANES):
        cols = slice(col, col + _LANES)
        for r in range(_ROWS):
            dest = _IDX[r] // 2 if _IDX[r] > 3 else r
            out[r, cols] = ((_X[r, cols] >> ((_IDX[r] % 2) * 16)) & 0xFFFF) * (dest + 1) + col
        out[0, cols] = (out[0, cols].astype(np.float32) * _SCALE[0]).astype(np.int32)
    return out


def test_a_kernel_with_hoisted_work_is_stocks_bit_for_bit():
    out = _same_as_stock(_fn, _IDX, _X, _SCALE)
    np.testing.assert_array_equal(out, _expected())


def _loop_body():
    """(body jaxpr, number of loop constants) of a fori_loop like the kernel's."""

    def f(idx, x, scale):
        def body(i, acc):
            shifts = [jnp.remainder(idx[r], 2) * 16 for r in range(_ROWS)]
            fscale = scale * 2.0  # a float: stays
            ramp = jnp.broadcast_to(idx[0], (_LANES,))  # a broadcast: stays
            row = jnp.right_shift(x[0], shifts[0] + i)  # reads the counter: stays
            return acc + row * sum(shifts) + ramp + fscale.astype(jnp.int32)

        return lax.fori_loop(0, _TRIPS, body, jnp.zeros(_LANES, jnp.int32))

    closed = jax.make_jaxpr(f)(_IDX, _X[:, :_LANES], _SCALE[0])
    (scan,) = [e for e in closed.jaxpr.eqns if e.primitive is lax.scan_p]
    consts, _, _ = jx.scan_operands(scan.params, scan.invars)
    body, _ = jx.closed_jaxpr_parts(scan.params["jaxpr"])
    return inline_calls(body), len(consts)


def test_only_pure_invariant_integer_work_moves():
    body, num_consts = _loop_body()
    hoisted = hoisting.hoist(body, num_consts)
    assert hoisted is not None
    moved = [e.primitive.name for e in hoisted.prelude.eqns]
    kept = [e.primitive.name for e in hoisted.body.eqns]
    assert "rem" in moved or "select_n" in moved, moved
    assert "slice" in moved, moved
    # Floats, broadcasts and what reads the counter stay in the loop.
    assert all(np.dtype(v.aval.dtype).kind in "iub" for e in hoisted.prelude.eqns for v in e.outvars)
    assert "broadcast_in_dim" not in moved and "broadcast_in_dim" in kept
    assert "shift_right_arithmetic" in kept or "shift_right_logical" in kept
    # The body takes the prelude's results right after the loop constants.
    n_const_inputs = len(body.constvars) + num_consts
    assert len(hoisted.body.invars) == len(body.invars) + len(hoisted.prelude.outvars)
    assert list(hoisted.body.invars[num_consts : num_consts + len(hoisted.prelude.outvars)]) == list(
        hoisted.prelude.outvars
    )
    assert all(k < n_const_inputs for k in hoisted.inputs)
    assert hoisting.hoist(body, num_consts) is hoisted  # cached


def test_a_body_with_nothing_invariant_is_left_alone():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, a: a * 2 + i, x)

    closed = jax.make_jaxpr(f)(np.int32(1))
    (scan,) = [e for e in closed.jaxpr.eqns if e.primitive is lax.scan_p]
    consts, _, _ = jx.scan_operands(scan.params, scan.invars)
    body, _ = jx.closed_jaxpr_parts(scan.params["jaxpr"])
    assert hoisting.hoist(body, len(consts)) is None


def _sparse_core():
    try:
        from jax.experimental.pallas import tpu_sc as plsc
    except ImportError:
        return None
    return plsc if hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel") else None


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_parallel_loop_with_static_bounds_hoists_too(mode, monkeypatch):
    """ragged_gather_reduce's shape of work: per-row shifts from an index
    vector loaded before a `plsc.parallel_loop` over column chunks. (The
    stored value adds the column start, so the loop keeps its iterations:
    `rewrites.widening` would otherwise run it as one.)"""
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    moved = []
    real_hoist = hoisting.hoist

    def spy(jaxpr, n):
        result = real_hoist(jaxpr, n)
        moved.append(0 if result is None else len(result.prelude.eqns))
        return result

    monkeypatch.setattr(hoisting, "hoist", spy)
    rows, cols, lanes = 8, 64, 16

    def kernel(idx_hbm, x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))

        def scoped(idx_v, buf):
            pltpu.sync_copy(idx_hbm, idx_v)
            pltpu.sync_copy(x_hbm.at[pl.ds(w * rows, rows)], buf)
            idx = idx_v[...]

            @plsc.parallel_loop(0, cols, step=lanes)
            def _(c):
                sl = pl.ds(c, lanes)
                for r in range(rows):
                    shift = jnp.where(jnp.bitwise_and(idx[r], 1) == 0, 16, 0)
                    buf[r, sl] = jnp.right_shift(jnp.left_shift(buf[r, sl], shift), 16) + idx[r] // 2 + c

            pltpu.sync_copy(buf, o_hbm.at[pl.ds(w * rows, rows)])

        pl.run_scoped(scoped, pltpu.VMEM((rows,), jnp.int32), pltpu.VMEM((rows, cols), jnp.int32))

    idx = np.array([3, 8, 5, 0, 11, 6, 1, 4], np.int32)
    x = np.random.default_rng(2).integers(-(2**31), 2**31 - 1, (2 * 4 * rows, cols), dtype=np.int64).astype(np.int32)
    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore", num_cores=2, num_subcores=4)
        params = mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0)
        with mosaic_rt.force_interpret_mode(params):
            out = pl.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)(idx, x)
            out = np.asarray(jax.block_until_ready(out))
    assert any(moved), moved
    shifts = np.where(idx % 2 == 0, 16, 0).astype(np.int32)
    r = np.arange(x.shape[0]) % rows
    starts = np.arange(cols) // lanes * lanes
    expected = ((x << shifts[r][:, None]) >> 16) + (idx[r] // 2)[:, None] + starts
    np.testing.assert_array_equal(out, expected)
