"""HBM outputs at launch: in a launch of one device (any number of cores),
an output that needs no padding is written in place in XLA's result buffer
(threaded from its allocation to `kernel_end`, which returns it), so
nothing is copied out at kernel end; an output aliased to an input is too,
XLA giving that buffer the input's value (the input aliased to the
allocation's result). Every other output is read back as before.
Results are bit-identical to stock either way, uninitialized bytes
included, in every context XLA may place the buffers differently in (jit,
loops, vmap, donation, shard_map)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from lowered_text import DIRECT, prologue_items_with
from mosaic_rt.errors import MosaicRuntimeError

_ANY = pl.BlockSpec(memory_space=pl.ANY)
_DMA = pltpu.SemaphoreType.DMA(())


def _x(rows=16, seed=0, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((rows, 128)), dtype)


def _call(kernel, params, out_shape, *, in_specs=(_ANY,), out_specs=_ANY, scratch=(_DMA,), aliases=None, **kw):
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        in_specs=list(in_specs),
        out_specs=out_specs,
        scratch_shapes=list(scratch),
        input_output_aliases=aliases or {},
        interpret=params,
        **kw,
    )


def _directs(fn, *args) -> int:
    """How many outputs the lowered program writes in place (allocations
    with the `direct` flag)."""
    return prologue_items_with(jax.jit(fn).lower(*args).as_text(), DIRECT)


def _same_bits(ours, stock, what=""):
    for o, s in zip(jax.tree.leaves(ours), jax.tree.leaves(stock)):
        o, s = np.asarray(o), np.asarray(s)
        assert o.dtype == s.dtype and o.shape == s.shape, what
        np.testing.assert_array_equal(o.view(np.uint8), s.view(np.uint8), err_msg=what)


def _both(make, *args, **knobs):
    """(our result, stock result, our unjitted fn) of `make(params)(*args)`."""
    ours_fn = make(mosaic_rt.InterpretParams(**knobs))
    stock = jax.jit(make(pltpu.InterpretParams(**knobs)))(*args)
    return jax.jit(ours_fn)(*args), stock, ours_fn


def _dma_whole(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


def _dma_head(x_ref, o_ref, sem):
    # Only the first 8 rows: the rest of the output is never written.
    copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, 8)], o_ref.at[pl.ds(0, 8)], sem)
    copy.start()
    copy.wait()


def _nothing(x_ref, o_ref, sem):
    del x_ref, o_ref, sem


def _copy_call(kernel, params, x):
    return _call(kernel, params, jax.ShapeDtypeStruct(x.shape, x.dtype))


@pytest.mark.parametrize("fill", ["nan", "zero"])
@pytest.mark.parametrize("kernel", [_dma_whole, _dma_head, _nothing])
def test_written_partly_written_and_unwritten_outputs_match_stock(kernel, fill):
    x = _x()
    ours, stock, fn = _both(functools.partial(_copy_call, kernel, x=x), x, uninitialized_memory=fill)
    _same_bits(ours, stock, kernel.__name__)
    assert _directs(fn, x) == 1


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.int8, jnp.uint32, jnp.bool_])
def test_other_dtypes_are_written_in_place_too(dtype):
    x = _x(seed=1).astype(dtype)
    for kernel in (_dma_whole, _dma_head):
        ours, stock, fn = _both(functools.partial(_copy_call, kernel, x=x), x)
        _same_bits(ours, stock, f"{kernel.__name__} {dtype}")
        assert _directs(fn, x) == 1


def test_blockspec_grid_outputs_padded_or_not():
    x = _x(24, seed=2)

    def kernel(x_ref, o_ref, p_ref):
        o_ref[...] = x_ref[...] * 2.0
        p_ref[...] = x_ref[...] + 1.0

    def make(params):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        padded = pl.BlockSpec((16, 128), lambda i: (i, 0))  # 24 rows: padded to 32
        return pl.pallas_call(
            kernel,
            grid=(3,),
            in_specs=[spec],
            out_specs=[spec, pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)] * 2,
            interpret=params,
        ), padded

    ours, stock, fn = _both(lambda p: make(p)[0], x)
    _same_bits(ours, stock)
    assert _directs(fn, x) == 2

    def make_padded(params):
        spec = pl.BlockSpec((16, 128), lambda i: (i, 0))
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] - 1.0),
            grid=(2,),
            in_specs=[spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            interpret=params,
        )

    ours, stock, fn = _both(make_padded, x)
    _same_bits(ours, stock, "padded")
    assert _directs(fn, x) == 0, "an output padded to whole blocks is read back"


def _head_from_tail(x_ref, o_ref, sem):
    del x_ref
    _dma_head(o_ref.at[pl.ds(8, 8)], o_ref, sem)


def test_an_aliased_output_is_written_in_place():
    x = _x(seed=4)
    ours, stock, fn = _both(
        lambda p: _call(_head_from_tail, p, jax.ShapeDtypeStruct(x.shape, x.dtype), aliases={0: 0}), x
    )
    _same_bits(ours, stock)
    assert _directs(fn, x) == 1


def test_an_aliased_input_read_after_the_launch_keeps_its_value():
    # XLA copies the input into the output's buffer first (x lives on).
    x = _x(seed=15)
    want = np.asarray(x)

    def make(params):
        call = _call(_head_from_tail, params, jax.ShapeDtypeStruct(x.shape, x.dtype), aliases={0: 0})
        return lambda x: (call(x), x * 1.0, call(x + 1.0))

    ours, stock, fn = _both(make, x)
    _same_bits(ours, stock)
    _same_bits(ours[1], want)
    assert _directs(fn, x) == 2
    donated = jax.jit(make(mosaic_rt.InterpretParams()), donate_argnums=0)
    for _ in range(2):
        _same_bits(donated(jnp.asarray(want)), stock)


def test_aliased_outputs_in_another_order_than_their_buffers():
    # Output 1 is input 0's buffer, allocated before output 0's: kernel_end
    # takes the direct buffers in allocation order.
    x, y = _x(seed=16), _x(seed=17)

    def kernel(x_ref, y_ref, o_ref, p_ref, sem):
        _dma_head(y_ref, o_ref, sem)
        _dma_head(p_ref.at[pl.ds(8, 8)], p_ref, sem)
        del x_ref

    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    make = lambda p: _call(  # noqa: E731
        kernel, p, [shape, shape], in_specs=(_ANY, _ANY), out_specs=[_ANY, _ANY], aliases={0: 1}
    )
    ours, stock, fn = _both(make, x, y)
    _same_bits(ours, stock)
    assert _directs(fn, x, y) == 2

    def looped(params):
        call = make(params)
        return lambda x, y: lax.fori_loop(0, 3, lambda i, c: tuple(call(c[1], c[0] + i)), (x, y))

    ours, stock, fn = _both(looped, x, y)
    _same_bits(ours, stock, "in a loop")


def test_an_aliased_output_beside_one_written_in_place():
    x = _x(seed=13)

    def kernel(x_ref, o_ref, p_ref, sem):
        del x_ref
        _dma_head(o_ref.at[pl.ds(8, 8)], p_ref, sem)
        _dma_head(p_ref, o_ref, sem)

    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    ours, stock, fn = _both(lambda p: _call(kernel, p, [shape, shape], out_specs=[_ANY, _ANY], aliases={0: 0}), x)
    _same_bits(ours, stock)
    assert _directs(fn, x) == 2


def _write_input_then_dma(x_ref, o_ref, scratch, sem):
    scratch[...] = jnp.full(scratch.shape, 3.0, jnp.float32)
    _dma_whole(scratch, x_ref.at[pl.ds(0, 8)], sem)
    _dma_whole(x_ref, o_ref, sem)


def test_donated_input_the_kernel_writes():
    # The input is copied into simulated memory (the kernel writes it), so
    # XLA may give the output the donated input's memory right away.
    x = _x(seed=14)
    want = np.asarray(x)

    def make(params):
        return _call(
            _write_input_then_dma,
            params,
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            scratch=(pltpu.VMEM((8, 128), jnp.float32), _DMA),
        )

    stock = jax.jit(make(pltpu.InterpretParams()))(jnp.asarray(want))
    fn = jax.jit(make(mosaic_rt.InterpretParams()), donate_argnums=0)
    for _ in range(3):
        _same_bits(fn(jnp.asarray(want)), stock)


def test_in_a_loop_that_feeds_each_output_to_the_next_launch():
    x = _x(seed=5)

    def make(params):
        call = _copy_call(_dma_head, params, x)
        add = _copy_call(_dma_whole, params, x)

        def f(x):
            def body(i, y):
                return add(call(y) + i)

            y = lax.fori_loop(0, 3, body, x)
            # And a while loop whose carry is the output itself.
            return lax.while_loop(lambda c: c[1] < 2, lambda c: (call(c[0]), c[1] + 1), (y, 0))[0]

        return f

    ours, stock, fn = _both(make, x)
    _same_bits(ours, stock)
    assert _directs(fn, x) == 3


def test_vmap_and_outputs_used_twice():
    xs = jnp.stack([_x(seed=6), _x(seed=7)])

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = x_ref[...] * 0.5

    def make(params):
        # vmap adds a grid dimension (HBM refs would need trivial blocks).
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        call = pl.pallas_call(
            kernel,
            grid=(2,),
            in_specs=[spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct(xs[0].shape, xs.dtype),
            interpret=params,
        )

        def f(xs):
            y = jax.vmap(call)(xs)
            return y, y * 2.0, call(y[1])

        return f

    ours, stock, fn = _both(make, xs)
    _same_bits(ours, stock)
    assert _directs(fn, xs) == 2


def test_donated_input_of_the_outputs_shape():
    x = _x(seed=8)
    want = np.asarray(x)
    stock = jax.jit(_copy_call(_dma_whole, pltpu.InterpretParams(), x))(x)
    for kernel in (_dma_whole, _dma_head):
        ours_stock = jax.jit(_copy_call(kernel, pltpu.InterpretParams(), x))(jnp.asarray(want))
        fn = jax.jit(_copy_call(kernel, mosaic_rt.InterpretParams(), x), donate_argnums=0)
        for _ in range(3):  # XLA may give the output the donated input's memory
            _same_bits(fn(jnp.asarray(want)), ours_stock, kernel.__name__)
    _same_bits(stock, want)


def test_an_output_returned_twice_and_donated_through_a_loop():
    x = _x(seed=9)

    def make(params):
        call = _copy_call(_dma_whole, params, x)

        def f(x):
            y = lax.fori_loop(0, 2, lambda i, y: call(y) * 2.0, x)
            z = call(y)
            return z, z

        return f

    stock = jax.jit(make(pltpu.InterpretParams()))(x)
    fn = jax.jit(make(mosaic_rt.InterpretParams()), donate_argnums=0)
    _same_bits(fn(jnp.asarray(np.asarray(x))), stock)


def test_shard_map_one_device_in_place_several_read_back():
    for n in (1, 2):
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

        def make(params, mesh=mesh):
            call = _call(_dma_head, params, jax.ShapeDtypeStruct((16, 128), jnp.float32))
            return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)

        x = jax.device_put(_x(16 * n, seed=10), NamedSharding(mesh, P("x")))
        ours, stock, fn = _both(make, x)
        _same_bits(ours, stock, f"{n} device(s)")
        assert _directs(fn, x) == (1 if n == 1 else 0)


@pytest.mark.parametrize("aliased", [False, True])
def test_several_cores_write_in_place(aliased):
    # The cores' programs run inside one call of the device's program,
    # between the allocation and kernel_end.
    x = _x(seed=11)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 3.0

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    ours, stock, fn = _both(
        lambda p: pl.pallas_call(
            kernel,
            grid=(2,),
            in_specs=[spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
            input_output_aliases={0: 0} if aliased else {},
            interpret=p,
        ),
        x,
        num_cores_or_threads=2,
    )
    _same_bits(ours, stock)
    assert _directs(fn, x) == 1


def _direct_launch(pass_output: bool):
    """One device's launch through the FFI wrappers with a direct output
    that a DMA fills from `x`; kernel_end gets that output, or (a wiring
    slip, as if XLA had copied it) a different array of its shape."""

    # on_wait: the copy lands at its wait, as the test orders it; eager it
    # lands at its start, into memory the slipped program no longer holds.
    config = F.LaunchConfig(dma_execution_mode="on_wait")

    def f(x):
        token, handle = F.kernel_begin(F.new_token(), jnp.int32(0), uid=0xD1EC, config=config)
        token, src = F.allocate_buffer(token, handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, init=x)
        token, dst, out = F.allocate_buffer(
            token, handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, direct=True
        )
        token, sem = F.allocate_semaphores(token, handle, 0, 0, kind="dma")
        token = F.dma_start(token, handle, 0, 0, F.DmaStart(F.DmaSide("hbm", src), F.DmaSide("hbm", dst), sem))
        token = F.dma_wait(token, handle, 0, 0, F.DmaWait(sem, x.size * x.dtype.itemsize))
        token, (res,) = F.kernel_end(token, handle, 0, outputs=(out if pass_output else x + 1,))
        return res

    return jax.jit(f)


def test_kernel_end_checks_it_gets_the_memory_the_kernel_wrote():
    x = _x(seed=12)
    np.testing.assert_array_equal(np.asarray(_direct_launch(True)(x)), np.asarray(x))
    with pytest.raises(MosaicRuntimeError, match="XLA copied an output"):
        with F.native_errors():
            jax.block_until_ready(_direct_launch(False)(x))
    # The next launch is fine.
    np.testing.assert_array_equal(np.asarray(_direct_launch(True)(x)), np.asarray(x))


def test_direct_needs_a_plain_output_buffer():
    handle = jnp.zeros((2,), jnp.uint32)
    with pytest.raises(ValueError, match="direct=True needs core=None"):
        F.allocate_buffer(
            F.new_token(),
            handle,
            0,
            None,
            space="hbm",
            dtype=jnp.float32,
            shape=(8,),
            init=jnp.zeros((8,)),
            direct=True,
        )
