"""HBM inputs at launch: an input the kernel never writes borrows XLA's
operand memory (no copy); any input it may write (store, DMA destination,
through sub-jaxprs, aliased to an output) is copied, so the caller's array
never changes. Results are bit-identical to stock either way."""

from __future__ import annotations

import os

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
from lowered_text import BORROW, prologue_items_with
from mosaic_rt.errors import MosaicRuntimeError

_ANY = pl.BlockSpec(memory_space=pl.ANY)


def _call(kernel, x, params, *, out_shape=None, in_specs=(_ANY,), out_specs=_ANY, scratch=(), aliases=None, **kw):
    return pl.pallas_call(
        kernel,
        out_shape=out_shape or jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=list(in_specs),
        out_specs=out_specs,
        scratch_shapes=list(scratch),
        input_output_aliases=aliases or {},
        interpret=params,
        **kw,
    )


def _borrows(fn, *args) -> int:
    """How many inputs the lowered program borrows (allocations with the
    `borrow` flag)."""
    return prologue_items_with(jax.jit(fn).lower(*args).as_text(), BORROW)


def _both(make, x, **knobs):
    """(stock result, our result, our jitted fn) of `make(params)(x)`."""
    stock = np.asarray(jax.jit(make(pltpu.InterpretParams(**knobs)))(x))
    ours_fn = make(mosaic_rt.InterpretParams(**knobs))
    return stock, np.asarray(jax.jit(ours_fn)(x)), ours_fn


def _x(rows=16, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((rows, 128)), jnp.float32)


def _dma_copy_kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


def _dma_then_scale(x_ref, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_ref, buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] * 2.0 + 1.0


def _dma_in_scope(x_ref, o_ref, sem):
    # Read inside run_scoped, whose body binds the scratch it allocates
    # after the refs it closes over.
    def scoped(buf, sem2):
        copy = pltpu.make_async_copy(x_ref, buf, sem2)
        copy.start()
        copy.wait()
        _dma_copy_kernel(buf, o_ref, sem)

    pl.run_scoped(scoped, pltpu.VMEM((16, 128), jnp.float32), pltpu.SemaphoreType.DMA(()))


def _write_vmem_block(x_ref, o_ref):
    # Writes the kernel's VMEM block of the input, never its HBM buffer.
    x_ref[...] = x_ref[...] * 4.0
    o_ref[...] = x_ref[...] + 1.0


@pytest.mark.parametrize("knobs", [{}, {"detect_races": True, "dma_execution_mode": "eager"}])
def test_read_only_inputs_are_borrowed_and_match_stock(knobs):
    x = _x()
    keep = np.asarray(x).copy()
    # An HBM input read by a DMA and a load; a VMEM-blocked input (only the
    # block copies read its HBM buffer).
    cases = {
        "dma": lambda p: _call(_dma_copy_kernel, x, p, scratch=[pltpu.SemaphoreType.DMA(())]),
        "dma+load": lambda p: _call(
            _dma_then_scale,
            x,
            p,
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())],
        ),
        "dma in run_scoped": lambda p: _call(_dma_in_scope, x, p, scratch=[pltpu.SemaphoreType.DMA(())]),
        "blockspec, block written": lambda p: _call(
            _write_vmem_block,
            x,
            p,
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            grid=(2,),
        ),
    }
    for name, make in cases.items():
        stock, ours, fn = _both(make, x, **knobs)
        np.testing.assert_array_equal(ours.view(np.uint32), stock.view(np.uint32), err_msg=name)
        assert _borrows(fn, x) == 1, name
    np.testing.assert_array_equal(np.asarray(x), keep)


@pytest.mark.parametrize("knobs", [{}, {"detect_races": True}])
def test_several_cores_borrow_read_only_inputs(knobs):
    # Their programs run inside one call of the device's program, before
    # kernel_end ends the borrow.
    x = _x(32)
    keep = np.asarray(x).copy()

    def kernel(x_ref, o_ref, buf, sem):
        i = pl.program_id(0)
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(i * 8, 8)], buf, sem)
        copy.start()
        copy.wait()
        o_ref[...] = buf[...] - 2.0

    make = lambda p: _call(  # noqa: E731
        kernel,
        x,
        p,
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        scratch=[pltpu.VMEM((8, 128), x.dtype), pltpu.SemaphoreType.DMA(())],
        grid=(4,),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    )
    stock, ours, fn = _both(make, x, num_cores_or_threads=2, **knobs)
    np.testing.assert_array_equal(ours.view(np.uint32), stock.view(np.uint32))
    assert _borrows(fn, x) == 1
    np.testing.assert_array_equal(np.asarray(x), keep)


def _dma_into(dst_ref, value, sem, scratch):
    scratch[...] = value
    copy = pltpu.make_async_copy(scratch, dst_ref, sem)
    copy.start()
    copy.wait()


def _dma_into_input(x_ref, o_ref, scratch, sem):
    _dma_into(x_ref.at[pl.ds(0, 8)], jnp.full((8, 128), 5.0, jnp.float32), sem, scratch)
    _dma_copy_kernel(x_ref, o_ref, sem)


def _dma_into_input_in_when(x_ref, o_ref, scratch, sem):
    @pl.when(pl.program_id(0) == 0)
    def _():
        _dma_into(x_ref.at[pl.ds(8, 8)], jnp.full((8, 128), 6.0, jnp.float32), sem, scratch)

    _dma_copy_kernel(x_ref, o_ref, sem)


def _dma_into_input_in_loop_and_scope(x_ref, o_ref, scratch, sem):
    def body(i, c):
        def scoped(tmp):
            _dma_into(x_ref.at[pl.ds(i * 8, 8)], jnp.full((8, 128), 7.0, jnp.float32) + i, sem, tmp)

        pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32))
        return c

    lax.fori_loop(0, 2, body, 0)
    _dma_copy_kernel(x_ref, o_ref, sem)


def _dma_into_input_in_while(x_ref, o_ref, scratch, sem):
    def body(i):
        _dma_into(x_ref.at[pl.ds(8, 8)], jnp.full((8, 128), 9.0, jnp.float32), sem, scratch)
        return i + 1

    lax.while_loop(lambda i: i < 2, body, 0)
    _dma_copy_kernel(x_ref, o_ref, sem)


@pytest.mark.parametrize(
    "kernel", [_dma_into_input, _dma_into_input_in_when, _dma_into_input_in_loop_and_scope, _dma_into_input_in_while]
)
def test_an_input_the_kernel_writes_is_copied(kernel):
    x = _x(seed=1)
    keep = np.asarray(x).copy()
    stock, ours, fn = _both(
        lambda p: _call(
            kernel, x, p, scratch=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA(())], grid=(1,)
        ),
        x,
    )
    np.testing.assert_array_equal(ours.view(np.uint32), stock.view(np.uint32))
    assert not np.array_equal(ours, keep), "the kernel wrote its input ref"
    assert _borrows(fn, x) == 0
    np.testing.assert_array_equal(np.asarray(x), keep, "the caller's array never changes")


def test_an_aliased_input_is_copied():
    x = _x(seed=2)
    keep = np.asarray(x).copy()

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    stock, ours, fn = _both(
        lambda p: _call(kernel, x, p, in_specs=[spec], out_specs=spec, grid=(2,), aliases={0: 0}), x
    )
    np.testing.assert_array_equal(ours.view(np.uint32), stock.view(np.uint32))
    np.testing.assert_array_equal(ours, keep * 3.0)
    assert _borrows(fn, x) == 0
    np.testing.assert_array_equal(np.asarray(x), keep)


def test_a_remote_dma_reads_a_peers_borrowed_input():
    n = 2
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def kernel(x_ref, o_ref, send, recv):
        me = lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + 1, n),))
        pl.semaphore_wait(barrier, 1)
        # Our input goes straight from our HBM to the next device's output.
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(lax.rem(me + 1, n),))
        copy.start()
        copy.wait()

    def make(params):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
            in_specs=[_ANY],
            out_specs=_ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
            interpret=params,
        )
        return jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)

    x = jax.device_put(np.arange(64 * n * 128, dtype=np.float32).reshape(64 * n, 128), NamedSharding(mesh, P("x")))
    keep = np.asarray(x).copy()
    stock, ours, fn = _both(make, x)
    np.testing.assert_array_equal(ours.view(np.uint32), stock.view(np.uint32))
    np.testing.assert_array_equal(ours, np.roll(keep, 64, axis=0))
    assert _borrows(fn, x) == 1
    for _ in range(20):  # devices finish at different times: peers still read
        np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), np.roll(keep, 64, axis=0))


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_a_peer_reads_a_borrowed_input_its_device_left_without_waiting(mode):
    # Device 0 starts a DMA of its input to device 1 and ends at once: in
    # on_wait mode device 1's wait may read that input after device 0 has
    # left (then a copy of it must have been kept; otherwise the borrow just
    # ends).
    n = 2
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def kernel(x_ref, o_ref, send, recv):
        me = lax.axis_index("x")
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=(1,))

        @pl.when(me == 0)
        def _():
            copy.start()

        @pl.when(me == 1)
        def _():
            copy.wait_recv()

    params = mosaic_rt.InterpretParams(dma_execution_mode=mode, on_semaphore_leak="ignore")
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
        in_specs=[_ANY],
        out_specs=_ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=params,
    )
    fn = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(np.arange(64 * n * 128, dtype=np.float32).reshape(64 * n, 128), NamedSharding(mesh, P("x")))
    keep = np.asarray(x).copy()
    assert _borrows(fn, x) == 1
    for _ in range(30):
        np.testing.assert_array_equal(np.asarray(fn(x))[64:], keep[:64])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_many_launches_of_varying_sizes_do_not_grow_memory():
    params = mosaic_rt.InterpretParams()
    fns = {}
    for rows in (512, 2048, 8192, 1536):  # 0.25 .. 4 MiB of float32
        x = _x(rows, seed=rows)
        fns[rows] = (
            jax.jit(
                _call(
                    _dma_then_scale,
                    x,
                    params,
                    out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                    scratch=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())],
                )
            ),
            x,
            np.asarray(x) * 2.0 + 1.0,
        )
    # XLA's and malloc's own memory settles in steps over the first
    # hundreds of launches (10-40 MiB on a quiet box, more under load), so
    # the check is on the last 500 launches: a leak of our buffers grows by
    # >= 0.25 MiB per launch (125 MiB over them); settled drift far less.
    rss = []
    for i in range(1100):
        fn, x, want = fns[list(fns)[i % len(fns)]]
        out = np.asarray(fn(x))
        if i % 97 == 0:
            np.testing.assert_array_equal(out, want)
        if i in (99, 599, 1099):
            rss.append(_rss_bytes())
    growth = rss[2] - rss[1]
    assert growth < 48 << 20, (
        f"RSS grew by {growth / 2**20:.1f} MiB from launch 600 to 1100 (MiB at launch 100,"
        f" 600, 1100: {[round(r / 2**20) for r in rss]})"
    )


def _borrowing_launch(keep_alive: bool):
    """One device's launch through the FFI wrappers that borrows `x` and
    reads it back, passing `x` to kernel_end only if `keep_alive`."""

    def f(x):
        token, handle = F.kernel_begin(F.new_token(), jnp.int32(0), uid=0x5EED, config=F.LaunchConfig())
        token, buf = F.allocate_buffer(
            token, handle, 0, None, space="hbm", dtype=x.dtype, shape=x.shape, init=x, borrow=True
        )
        token, out = F.load(token, handle, 0, 0, buf, None, space="hbm", shape=x.shape, dtype=x.dtype)
        token = F.kernel_end(token, handle, 0, keep_alive=(x,) if keep_alive else ())
        return out, token

    return jax.jit(f)


def test_kernel_end_checks_that_borrowed_inputs_were_kept_alive():
    x = _x(seed=3)
    out, _ = _borrowing_launch(True)(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))
    with pytest.raises(MosaicRuntimeError, match="not an operand of its kernel_end"):
        with F.native_errors():
            jax.block_until_ready(_borrowing_launch(False)(x))
    out, _ = _borrowing_launch(True)(x)  # the next launch is fine
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x))


def test_borrow_needs_an_initial_value():
    with pytest.raises(ValueError, match="borrow=True needs an init value"):
        F.allocate_buffer(
            F.new_token(), jnp.zeros((2,), jnp.uint32), 0, None, space="hbm", dtype=jnp.float32, shape=(8,), borrow=True
        )
