"""The native grid loop (`grid_begin` / `grid_copy_in` / `grid_copy_out`):
what the emitted program contains, and stock's behaviour at the edges the
corpus does not reach (block index errors, multi-dim revisits, visiting
orders on several cores, element blocks, dynamic grid bounds, the XLA
fallback for memory logging)."""

from __future__ import annotations

import logging
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from lowered_text import native_ops
from parity import assert_bitwise_equal, assert_same_error, run_case


class _Case:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args


def _both(fn, *args, **knobs):
    case = _Case(fn, *args)
    stock = run_case(case, pltpu.InterpretParams(**knobs))
    ours = run_case(case, mosaic_rt.InterpretParams(**knobs))
    return stock, ours


def _same(fn, *args, **knobs):
    stock, ours = _both(fn, *args, **knobs)
    assert not isinstance(stock, BaseException), stock
    assert not isinstance(ours, BaseException), ours
    assert_bitwise_equal(stock, ours)
    return ours


def _same_error(fn, *args, **knobs):
    stock, ours = _both(fn, *args, **knobs)
    assert isinstance(stock, BaseException), "stock did not fail"
    assert isinstance(ours, BaseException), "ours did not fail"
    assert_same_error(stock, ours)
    return ours


def _x(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(-99, 99, shape).astype(np.float32))


def _add(grid, block, index_map, shape, params, **kw):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    spec = pl.BlockSpec(block, index_map)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        grid=grid,
        in_specs=[spec, spec],
        out_specs=spec,
        interpret=params,
        **kw,
    )


def test_program_has_one_call_per_side_of_a_step_and_no_bookkeeping_kernels():
    x = _x((64, 128))
    f = jax.jit(_add((8,), (8, 128), lambda i: (i, 0), x.shape, mosaic_rt.InterpretParams()))
    lowered = f.lower(x, x)
    ops = native_ops(lowered.as_text())
    # The loop begins in the launch's prologue call (one core).
    for target in ("launch_begin", "grid_copy_in", "grid_copy_out"):
        assert ops[target] == 1, target
    assert ops["grid_begin"] == ops["copy_block"] == ops["check_revisit"] == 0
    hlo = lowered.compile().as_text()
    # The kernel's add, plus at most one constant broadcast outside the loop.
    assert len(re.findall(r"= \S+ fusion\(", hlo)) <= 2
    np.testing.assert_array_equal(np.asarray(f(x, x)), np.asarray(x + x))


@pytest.mark.parametrize("seed", [None, 7])
def test_2d_grid_parallel_order_revisited_blocks_and_reductions(seed):
    x = _x((32, 256), seed=1)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...] * (pl.program_id(0) + 1).astype(jnp.float32)

    def fn(params, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
            grid=(4, 2),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
            interpret=params,
        )(x)

    _same(fn, x, random_seed=seed)
    _same(fn, x, random_seed=seed, num_cores_or_threads=2)


def test_revisit_in_a_2d_grid_names_the_loop_indices():
    x = _x((16, 128))

    def fn(params, x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(2, 3),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (0, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (j % 2, 0)),
            interpret=params,
        )(x)

    err = _same_error(fn, x)
    assert "Revisited block" in str(err) and "(0, 2)" in str(err)


@pytest.mark.parametrize("which", ["input", "output"])
def test_out_of_bounds_block_index_is_stocks_error(which):
    x = _x((16, 128))
    good = pl.BlockSpec((8, 128), lambda i: (i, 0))
    bad = pl.BlockSpec((8, 128), lambda i: (i + 1, 0))

    def fn(params, x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + 1),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(2,),
            in_specs=[bad if which == "input" else good],
            out_specs=bad if which == "output" else good,
            interpret=params,
        )(x)

    err = _same_error(fn, x)
    assert "Out-of-bounds block index" in str(err)


def test_element_and_squeezed_block_dims():
    x = _x((4, 24, 128), seed=3)

    def fn(params, x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
            out_shape=jax.ShapeDtypeStruct((4, 16, 128), x.dtype),
            grid=(4, 2),
            in_specs=[pl.BlockSpec((None, pl.Element(8), 128), lambda i, j: (i, j * 8 + 4, 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda i, j: (i, j, 0)),
            interpret=params,
        )(x)

    _same(fn, x)


def test_scalar_prefetch_index_maps_and_aliasing():
    x = _x((32, 128), seed=4)
    order = jnp.asarray([3, 3, 1, 0], jnp.int32)

    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(jnp.float32)

    def fn(params, order, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(4,),
                in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
                out_specs=pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0)),
            ),
            input_output_aliases={1: 0},
            interpret=params,
        )(order, x)

    _same(fn, order, x)


@pytest.mark.parametrize("n", [3, 0])
def test_dynamic_grid_bounds_run_natively_as_stock(n):
    # A dynamic bound of an "arbitrary" dim (megablox's gmm has one) is an
    # operand of the native loop; the parallel dim keeps its seeded order,
    # split between two cores. A zero bound runs no step.
    x = _x((16, 512), seed=5)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...] * (pl.program_id(1) + 1).astype(jnp.float32)

    @jax.jit
    def run(n, x, *, params):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((16, 128), x.dtype),
            grid=(2, n),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
            interpret=params,
        )(x)

    def fn(params, n, x):
        return run(n, x, params=params)

    run = jax.jit(run.__wrapped__, static_argnames="params")
    for knobs in ({"random_seed": 3}, {"random_seed": 3, "num_cores_or_threads": 2}):
        _same(fn, jnp.int32(n), x, **knobs)
    hlo = run.lower(jnp.int32(n), x, params=mosaic_rt.InterpretParams()).as_text()
    ops = native_ops(hlo)
    assert ops["launch_begin"] == ops["grid_copy_in"] == ops["grid_copy_out"] == 1
    assert ops["copy_block"] == ops["check_revisit"] == 0


@pytest.mark.parametrize("shape", [(), (1,)])
def test_a_dynamic_bound_given_as_a_one_element_array(shape):
    # grid=(n,) with n of shape (1,), the count kept in an SMEM output the
    # steps increment: the TPU takes it (jax's
    # test_dynamic_grid_with_smem_output); our launch refused the operand's
    # rank, stock fails it too.
    from jax import lax

    def kernel(n_ref, o_ref):
        o_ref[0] = lax.cond(pl.program_id(0) == 0, lambda: 1, lambda: o_ref[0] + 1)

    @jax.jit
    def run(n):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            grid=(n,),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            interpret=mosaic_rt.InterpretParams(),
        )(n)

    for n in (1, 5):
        np.testing.assert_array_equal(np.asarray(run(jnp.full(shape, n, jnp.int32))), [n])


def test_memory_logging_falls_back_and_logs_block_copies(caplog):
    x = _x((16, 128), seed=6)
    from mosaic_rt.jax_internals import LoggingMode

    f = _add(
        (2,), (8, 128), lambda i: (i, 0), x.shape, mosaic_rt.InterpretParams(logging_mode=LoggingMode.SHARED_MEMORY)
    )
    with caplog.at_level(logging.INFO, logger="mosaic_rt.interpret"):
        out = jax.block_until_ready(f(x, x))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x + x))
    assert any("get_buffer_content" in r.getMessage() for r in caplog.records)


def test_cores_split_a_parallel_grid_as_stock(tmp_path):
    x = _x((64, 128), seed=8)

    def fn(params, x):
        return _add(
            (8,),
            (8, 128),
            lambda i: (i, 0),
            x.shape,
            params,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(x, x)

    _same(fn, x, num_cores_or_threads=3, random_seed=11)
    # The timeline still gets one grid span per step.
    out = jax.block_until_ready(
        fn(mosaic_rt.InterpretParams(num_cores_or_threads=2, trace_path=str(tmp_path / "t.json")), x)
    )
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x + x))
    import json

    (path,) = list(tmp_path.glob("t*.json"))
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    grid = [e for e in events if e.get("ph") == "X" and e.get("cat") == "grid"]
    assert len(grid) == 8, grid


@pytest.mark.parametrize(
    "grid,semantics",
    [
        ((2, 2, 2), ("parallel", "parallel", "arbitrary")),
        ((5,), ("parallel",)),
        ((1, 7), ("parallel", "parallel")),
        ((2000,), ("parallel",)),  # two shuffle rounds
    ],
)
def test_visiting_order_in_numpy_equals_jax_random(grid, semantics):
    from mosaic_rt import jax_internals as jx
    from mosaic_rt.interpret.launch import visiting_order

    mp = pltpu.CompilerParams(dimension_semantics=semantics)
    for seed in (None, 1, 12345, 2**31 - 1):
        ref = jax.jit(lambda: jx.randomized_grid_coordinates(grid, mp, seed))()  # noqa: B023 - called at once
        got = visiting_order._numpy_grid_coordinates(grid, jx.parallel_dim_semantics(mp, len(grid)), seed or 0)
        assert got is not None
        for a, b in zip(ref, got):
            assert np.asarray(a).dtype == b.dtype
            np.testing.assert_array_equal(np.asarray(a), b)
