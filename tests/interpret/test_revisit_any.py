"""`pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY)` on a
pallas_call output: its blocks may be revisited at any step, not only the
next one (the TPU pipeline restores a block from HBM when it comes back to
it), so a kernel can accumulate into an output whose index map leaves a
block and returns to it later (jax's
test_block_reduction_with_non_immediate_revisit). Without the mode such a
revisit stays an error, as stock reports it. Stock has no such mode: it
reports the revisit either way."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt.jax_internals import LoggingMode

R, C = 8, 128
ROWS, COLS = 3, 4  # grid (ROWS, COLS): the output's block j comes back on every row


def _column_sums(params, x, *, revisit=True):
    """Sums the ROWS row blocks of ``x`` into one row of blocks: step (i, j)
    adds block (i, j) into output block (0, j), visited once per row."""

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...] * (pl.program_id(0) + 1).astype(x_ref.dtype)

    mode = pl.Buffered(1, revisit=pl.RevisitMode.ANY) if revisit else None
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((R, COLS * C), x.dtype),
        grid=(ROWS, COLS),
        in_specs=[pl.BlockSpec((R, C), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((R, C), lambda i, j: (0, j), pipeline_mode=mode),
        interpret=params,
    )(x)


def _want(x):
    blocks = np.asarray(x).reshape(ROWS, R, COLS * C)
    return sum(blocks[i] * (i + 1) for i in range(ROWS))


_X = np.random.default_rng(0).integers(-50, 50, size=(ROWS * R, COLS * C)).astype(np.float32)


@pytest.mark.parametrize(
    "params",
    [
        mosaic_rt.InterpretParams(),
        mosaic_rt.InterpretParams(detect_races=True, detect_uninitialized=True),
        mosaic_rt.InterpretParams(dma_execution_mode="on_wait"),
        # Memory logging keeps the grid bookkeeping in XLA (the other loop).
        mosaic_rt.InterpretParams(logging_mode=LoggingMode.SHARED_MEMORY),
    ],
    ids=["default", "checked", "on_wait", "xla_loop"],
)
def test_an_output_revisited_at_any_step_accumulates(params):
    got = jax.jit(lambda x: _column_sums(params, x))(_X)
    np.testing.assert_array_equal(np.asarray(got), _want(_X))


def test_two_cores_each_with_its_own_column_blocks():
    # A leading parallel dimension splits the column blocks between two
    # cores: each revisits its own blocks (every row), restored into its own
    # VMEM.
    half = COLS // 2

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += x_ref[...] * (pl.program_id(1) + 1).astype(x_ref.dtype)

    got = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((R, COLS * C), _X.dtype),
        grid=(2, ROWS, half),
        in_specs=[pl.BlockSpec((R, C), lambda p, i, j: (i, p * half + j))],
        out_specs=pl.BlockSpec(
            (R, C), lambda p, i, j: (0, p * half + j), pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY)
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary", "arbitrary")),
        interpret=mosaic_rt.InterpretParams(num_cores_or_threads=2),
    )(_X)
    np.testing.assert_array_equal(np.asarray(got), _want(_X))


def test_without_the_mode_the_revisit_is_still_an_error():
    with pytest.raises(Exception, match="Revisited block"):
        jax.block_until_ready(_column_sums(mosaic_rt.InterpretParams(), _X, revisit=False))
