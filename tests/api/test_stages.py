"""mosaic_rt.stages: a recording splits first calls into a kernel's stages
(trace, interpretation, lowering, compile) and everything else, for
mosaic_rt's interpreter and stock's alike."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import pytest
from core_mesh import core_mesh
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mosaic_rt import stages

pytestmark = pytest.mark.timeout(120)


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _kernel_program(params, rows):
    def f(x):
        return pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=params)(x)

    f.__name__ = f"kernel_program_{rows}"
    return jax.jit(f), jnp.zeros((rows, 128), jnp.float32)


@pytest.mark.parametrize("params", [mosaic_rt.InterpretParams(), pltpu.InterpretParams()], ids=["ours", "stock"])
def test_a_kernels_first_call_is_split_from_the_other_compiles(params):
    rows = 16 if isinstance(params, mosaic_rt.InterpretParams) else 24  # never seen before in this process
    f, x = _kernel_program(params, rows)
    with stages.record() as rec:
        jax.block_until_ready(f(x))
        jax.block_until_ready(jnp.cos(jnp.ones(rows + 1)))  # the "test's own" eager op
    s = rec.summary()
    assert s["kernels"] == 1
    assert f"kernel_program_{rows}" in rec.kernel_functions
    for stage in ("kernel_trace", "kernel_interpret", "kernel_compile", "other_compile"):
        assert s[stage] > 0, (stage, s)
    assert s["total"] + 1e-3 >= sum(s[k] for k in stages.STAGES)  # each rounded
    assert s["rest"] >= 0


def test_a_second_call_compiles_nothing_and_nested_recordings_both_see_events():
    f, x = _kernel_program(mosaic_rt.InterpretParams(), 32)
    with stages.record() as outer:
        jax.block_until_ready(f(x))
        with stages.record() as inner:
            jax.block_until_ready(f(x))
    assert outer.summary()["kernels"] == 1
    assert inner.summary()["kernels"] == 0 and inner.summary()["kernel_compile"] == 0


def test_core_map_is_a_kernel_too():
    # Its cores' programs compile on a thread of their own beside the
    # caller's compile (interpret/launch/cores.py): not interpretation time.
    if hasattr(pltpu, "TensorCoreMesh"):  # jax >= 0.11
        mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
    else:
        mesh = core_mesh(2)

    @jax.jit
    def f(x):
        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh, interpret=mosaic_rt.InterpretParams())
        def run(x_hbm, o_hbm):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_hbm.at[pl.ds(c * 8, 8)], o_hbm.at[pl.ds(c * 8, 8)])

        return run(x)

    with stages.record() as rec:
        out = jax.block_until_ready(f(jnp.ones((16, 128), jnp.float32)))
    assert (out == 1).all()
    s = rec.summary()
    assert s["kernels"] >= 1 and s["kernel_compile"] > 0 and s["kernel_interpret"] > 0
    assert s["kernel_interpret"] < s["total"]


def test_what_the_interpreter_compiles_is_the_kernels_and_not_interpretation():
    with stages.record() as rec:
        with stages.interpreting():
            jax.block_until_ready(jax.jit(lambda x: x * 3.0)(jnp.ones(7)))
    s = rec.summary()
    assert rec.nested > 0 and s["kernel_compile"] > 0 and s["other_compile"] == 0
    assert s["kernel_interpret"] <= s["total"] - rec.nested + 1e-3  # each rounded
