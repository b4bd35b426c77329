"""A finished launch frees its runtime, and so its simulated memory.

XLA runs our handlers on its pool threads too, not only on a device's (or a
core's) own thread, and each thread caches the runtime of the launch it last
ran an op of. A cache that owned the runtime kept it alive on every pool
worker that ran no op of ours afterwards: a SparseCore kernel (16 subcores
on the private client of `interpret/launch/cores.py`, ~100 workers) leaked
one runtime -- its inputs' copy, outputs and scratch -- per launch, and a
test calling tpu-inference's ragged gather-reduce 220 times was killed for
memory. `_native.live_runtimes()` counts runtimes exactly.
"""

from __future__ import annotations

import gc
import time

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt import _native

pytestmark = pytest.mark.timeout(120)


def _sparse_core():
    try:
        from jax.experimental.pallas import tpu_sc as plsc
    except ImportError:
        return None
    return plsc if hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel") else None


def _live_runtimes(settle_at: int | None = None) -> int:
    """Runtimes alive now; with `settle_at`, once that many (waiting up to
    60 s: the deadlock detector's thread may hold an ended launch's runtime
    for the moment of one check, and a busy machine may deschedule it; the
    wait ends as soon as the count settles, and only a leak reaches the
    deadline)."""
    gc.collect()  # a `mosaic_rt.Runtime` of an earlier test, unreferenced
    deadline = time.monotonic() + 60.0
    while settle_at is not None and _native.live_runtimes() != settle_at and time.monotonic() < deadline:
        time.sleep(0.01)
    return _native.live_runtimes()


@pytest.mark.skipif(_sparse_core() is None, reason="this jax has no SparseCore meshes (tpu_sc.VectorSubcoreMesh)")
@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_sparse_core_gather_launches_free_their_runtimes(mode):
    """ragged_gather_reduce_v2's shape of work, small: 16 subcores, each
    gathering rows of the uint32 view of a bf16 input by index vectors. The
    indices are XLA vectors that need no native op, so XLA computes them
    (and runs the gathers after them) on its pool workers: with the owning
    cache, most launches of this kernel stayed alive."""
    from mosaic_rt.tpu_check.tpu_info import answering_for

    plsc = _sparse_core()
    subcores, b, rows, cols, gathers = 16, 256, 1024, 256, 4
    x = jnp.asarray(np.random.default_rng(3).integers(0, 1 << 16, (rows, cols), dtype=np.uint16).view(jnp.bfloat16))

    def indices(w, k, xp=np):
        return (xp.arange(b, dtype=np.int32) * (2 * k + 1) + w * 3) % (rows // 2)

    def kernel(x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))

        def scoped(buf, acc, sem):
            acc[...] = jnp.zeros(acc.shape, acc.dtype)
            for k in range(gathers):
                pltpu.async_copy(x_hbm.bitcast(jnp.uint32).at[indices(w, k, jnp)], buf, sem).wait()
                acc[...] += buf[...]
            pltpu.sync_copy(acc, o_hbm.at[pl.ds(w * b, b)])

        scratch = (pltpu.VMEM((b, cols), jnp.uint32), pltpu.VMEM((b, cols), jnp.uint32), pltpu.SemaphoreType.DMA)
        pl.run_scoped(scoped, *scratch)

    # The uint32 view packs rows 2r (low half) and 2r + 1 of the bf16 input.
    x16 = np.asarray(x).view(np.uint16).astype(np.uint32)
    x32 = x16[0::2] | x16[1::2] << 16
    want = np.concatenate([sum(x32[indices(w, k)] for k in range(gathers)) for w in range(subcores)])
    with answering_for("v6e"):
        mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore", num_cores=1)
        params = mosaic_rt.InterpretParams(dma_execution_mode=mode, wait_timeout=30.0)
        with mosaic_rt.force_interpret_mode(params):
            f = jax.jit(pl.kernel(kernel, out_type=jax.ShapeDtypeStruct((subcores * b, cols), jnp.uint32), mesh=mesh))
            before = _live_runtimes()
            for launch in range(6):
                out = jax.block_until_ready(f(x))
                np.testing.assert_array_equal(np.asarray(out), want.astype(np.uint32))
                alive = _live_runtimes(settle_at=before) - before
                assert alive == 0, f"launch {launch}: {alive} finished launch(es) still alive"
