"""A launch's scaffolding is two native calls: `launch_begin` joins the
launch, makes every allocation of the launch (HBM inputs, outputs, scalar
prefetch, scratch buffers, semaphore arrays), the device barrier and (one
core per device) begins the grid loop; `kernel_end` reports leaks and
leaves. The native side runs the same steps
in the same order as the single-purpose ops did, so results stay
bit-identical to stock across knobs (races, DMA modes, several cores,
devices with and without a barrier semaphore)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from lowered_text import native_ops

_SCAFFOLDING = (
    "kernel_begin",
    "allocate_buffer",
    "allocate_semaphores",
    "iota_ids",
    "device_barrier",
    "grid_begin",
    "leak_report",
)


def _calls(text: str) -> dict:
    """Native ops of the lowered ``text`` by target (without the prefix)."""
    return dict(native_ops(text))


def _same_bits(ours, stock):
    for o, s in zip(jax.tree.leaves(ours), jax.tree.leaves(stock)):
        o, s = np.asarray(o), np.asarray(s)
        assert o.dtype == s.dtype and o.shape == s.shape
        np.testing.assert_array_equal(o.view(np.uint8), s.view(np.uint8))


def _scratchy(params, *, alias=False):
    """A kernel with every kind of launch allocation: scalar prefetch, a
    BlockSpec input and output (optionally aliased), an input left in HBM,
    VMEM and SMEM scratch, a DMA semaphore array and a regular semaphore."""

    def kernel(s_ref, x_ref, h_ref, o_ref, vbuf, sbuf, dma, sem):
        i = pl.program_id(0)
        sbuf[0] = s_ref[i] + 1
        copy = pltpu.make_async_copy(h_ref.at[pl.ds(i * 8, 8)], vbuf, dma.at[i % 2])
        copy.start()
        copy.wait()
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...] * sbuf[0].astype(jnp.float32) + vbuf[...]

    spec = pl.BlockSpec((8, 128), lambda i, s: (i, 0))
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(2,),
        in_specs=[spec, pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=spec,
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SMEM((1,), jnp.int32),
            pltpu.SemaphoreType.DMA((2,)),
            pltpu.SemaphoreType.REGULAR,
        ],
    )
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid_spec=grid_spec,
        input_output_aliases={1: 0} if alias else {},
        interpret=params,
    )


def _scratchy_args():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((16, 128)), jnp.float32)
    h = jnp.asarray(np.random.default_rng(1).standard_normal((16, 128)), jnp.float32)
    return jnp.asarray([3, 5], jnp.int32), x, h


def test_a_launch_has_one_prologue_and_one_epilogue_call():
    args = _scratchy_args()
    text = jax.jit(_scratchy(mosaic_rt.InterpretParams(on_semaphore_leak="raise"))).lower(*args).as_text()
    calls = _calls(text)
    assert calls.get("launch_begin") == 1 and calls.get("kernel_end") == 1, calls
    for name in _SCAFFOLDING:
        assert name not in calls, (name, calls)
    # Two inputs, the output, the scalars, the input and output blocks, VMEM
    # and SMEM scratch; then two semaphore arrays.
    kinds = re.search(r"item_kinds = dense<\[([\d, ]+)\]>", text).group(1)
    assert [int(k) for k in kinds.split(",")] == [0] * 8 + [1, 1]
    assert "barrier = 1" in text and 'leak_policy = "raise"' in text


def test_leak_policy_ignore_adds_nothing_to_kernel_end():
    args = _scratchy_args()
    text = jax.jit(_scratchy(mosaic_rt.InterpretParams(on_semaphore_leak="ignore"))).lower(*args).as_text()
    assert "leak_policy" not in text


def test_run_scoped_allocations_keep_their_own_calls():
    def kernel(x_ref, o_ref):
        def body(tmp):
            tmp[...] = x_ref[...] + 1
            o_ref[...] = tmp[...]

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), interpret=mosaic_rt.InterpretParams()
    )
    x = jnp.ones((8, 128), jnp.float32)
    calls = _calls(jax.jit(f).lower(x).as_text())
    assert calls.get("launch_begin") == 1 and calls.get("allocate_buffer") == 1, calls
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x)), 2.0)


@pytest.mark.parametrize("alias", [False, True])
@pytest.mark.parametrize("mode", ["on_wait", "eager"])
@pytest.mark.parametrize("races", [False, True])
def test_every_kind_of_allocation_matches_stock(alias, mode, races):
    args = _scratchy_args()
    knobs = dict(dma_execution_mode=mode, detect_races=races)
    stock = jax.jit(_scratchy(pltpu.InterpretParams(**knobs), alias=alias))(*args)
    ours = jax.jit(_scratchy(mosaic_rt.InterpretParams(**knobs), alias=alias))(*args)
    _same_bits(ours, stock)


@pytest.mark.parametrize("bounds", ["padded", "logical"])
def test_buffer_bounds_match_stock(bounds):
    args = _scratchy_args()
    # Pallas asks for TPU hardware info (the tiling) through the abstract mesh.
    tpu = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice("TPU v5e", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(tpu):
        stock = jax.jit(_scratchy(pltpu.InterpretParams(buffer_bounds=bounds)))(*args)
        ours = jax.jit(_scratchy(mosaic_rt.InterpretParams(buffer_bounds=bounds)))(*args)
    _same_bits(ours, stock)


def test_two_cores_per_device_match_stock():
    # The semaphore is only allocated: a signal without a target goes to
    # core 0 (stock's rule), so core 1 could not wait on its own.
    def kernel(x_ref, o_ref, acc, sem):
        del sem
        acc[...] = x_ref[...] + 1
        o_ref[...] = acc[...] * 2

    def make(params):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
            grid=(4,),
            in_specs=[spec],
            out_specs=spec,
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
            interpret=params,
        )

    x = jnp.arange(32 * 128, dtype=jnp.float32).reshape(32, 128)
    stock = jax.jit(make(pltpu.InterpretParams(num_cores_or_threads=2)))(x)
    ours = jax.jit(make(mosaic_rt.InterpretParams(num_cores_or_threads=2)))(x)
    _same_bits(ours, stock)


def _right_permute(params, n, collective):
    """Each device sends its block to its right neighbour by remote DMA;
    with ``collective`` the kernel meets its neighbours on the barrier
    semaphore instead of the launch's device barrier."""

    def kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        right = jax.lax.rem(me + 1, n)
        if collective:
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1, device_id=(right,))
            pl.semaphore_signal(barrier, 1, device_id=(jax.lax.rem(me + n - 1, n),))
            pl.semaphore_wait(barrier, 2)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(right,))
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0) if collective else None,
        interpret=params,
    )
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
    return jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))


@pytest.mark.parametrize("collective", [False, True])
def test_devices_with_and_without_a_barrier_semaphore_match_stock(collective):
    n = 4
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    ours_fn = _right_permute(mosaic_rt.InterpretParams(), n, collective)
    text = ours_fn.lower(x).as_text()
    assert ("barrier = 0" if collective else "barrier = 1") in text
    assert "mosaic_rt_device_barrier" not in text
    stock = _right_permute(pltpu.InterpretParams(), n, collective)(x)
    _same_bits(ours_fn(x), stock)


def test_allocations_are_logged_as_before(caplog):
    from mosaic_rt.jax_internals import LoggingMode

    args = _scratchy_args()
    params = mosaic_rt.InterpretParams(logging_mode=LoggingMode.SHARED_MEMORY)
    with caplog.at_level("INFO", logger="mosaic_rt.interpret"):
        out = jax.jit(_scratchy(params))(*args)
        jax.block_until_ready(out)
    # Every buffer of the prologue (see above), none of the semaphores.
    assert caplog.text.count("`allocate_buffer`") == 8
    _same_bits(out, jax.jit(_scratchy(pltpu.InterpretParams()))(*args))
