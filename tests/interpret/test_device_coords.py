"""Mesh coordinates and device ids computed natively from `partition-id`.

Under a fully manual shard_map the interpreter reads `partition-id` and
derives every axis index and the logical device id in one scalar program
(no XLA fusion). These kernels make each device's coordinates visible in
its output and route remote signals/DMAs by them, on meshes of one and two
axes in device order and permuted, and compare with stock bit for bit; pmap
(jax lowers it either way, by version) must agree too.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.timeout(120)

TILE = (8, 128)
LOGICAL, MESH = pl.DeviceIdType.LOGICAL, pl.DeviceIdType.MESH


def _coords_kernel(axes, sizes, id_type):
    """Each device writes ``x + 1000*i0 + 100*i1``, its logical id, and
    sends that id to its predecessor along the last axis by a remote copy
    (so each device receives its successor's id)."""
    last, n_last = axes[-1], sizes[-1]

    def kernel(x_ref, o_ref, ids_ref, recv_ref, send_sem, recv_sem):
        idx = [lax.axis_index(a) for a in axes]
        me = idx[0]
        for a, i in zip(sizes[1:], idx[1:]):
            me = me * a + i
        coords = sum(i.astype(jnp.float32) * 10.0 ** (3 - k) for k, i in enumerate(idx))
        o_ref[...] = x_ref[...] + coords
        ids_ref[...] = jnp.full(TILE, me, jnp.int32)
        prev = lax.rem(idx[-1] + n_last - 1, n_last)
        if id_type is MESH:
            target = {a: (prev if a == last else i) for a, i in zip(axes, idx)}
        else:
            target = me - idx[-1] + prev
        copy = pltpu.make_async_remote_copy(
            ids_ref, recv_ref, send_sem, recv_sem, device_id=target, device_id_type=id_type
        )
        copy.start()
        copy.wait()

    return kernel


def _run(params, devices, axes, sizes, id_type, manual=None):
    kernel = _coords_kernel(axes, sizes, id_type)
    n = int(np.prod(sizes))
    call = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct(TILE, jnp.float32),
            jax.ShapeDtypeStruct(TILE, jnp.int32),
            jax.ShapeDtypeStruct(TILE, jnp.int32),
        ),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM),) * 3,
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        interpret=params,
    )
    mesh = Mesh(np.asarray(devices).reshape(sizes), axes)
    spec = P(axes)
    kwargs = {} if manual is None else {"axis_names": set(manual)}
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=(spec,) * 3, check_vma=False, **kwargs))
    x = jnp.arange(n * TILE[0] * TILE[1], dtype=jnp.float32).reshape(-1, TILE[1])
    with mosaic_rt.native_errors():
        return [np.asarray(o) for o in f(x)], f.lower(x).compile().as_text()


def _check(devices, axes, sizes, id_type):
    stock, _ = _run(pltpu.InterpretParams(), devices, axes, sizes, id_type)
    ours, hlo = _run(mosaic_rt.InterpretParams(wait_timeout=20), devices, axes, sizes, id_type)
    for s, o in zip(stock, ours):
        np.testing.assert_array_equal(o, s)
        assert o.tobytes() == s.tobytes()
    return ours, hlo


@pytest.mark.parametrize("id_type", [LOGICAL, MESH], ids=["logical", "mesh"])
@pytest.mark.parametrize("order", ["in_order", "permuted"])
@pytest.mark.parametrize("axes,sizes", [(("x",), (4,)), (("x", "y"), (2, 4)), (("a", "b"), (4, 2))])
def test_coordinates_and_ids_match_stock(axes, sizes, order, id_type):
    n = int(np.prod(sizes))
    devices = list(jax.devices()[:n])
    if order == "permuted":
        devices = devices[::-1][1:] + devices[::-1][:1]
    (out, ids, recv), _ = _check(devices, axes, sizes, id_type)
    # Device k (row-major mesh position) wrote id k; its block of `recv`
    # holds its successor's id along the last axis.
    blocks = ids[:: TILE[0], 0]
    np.testing.assert_array_equal(blocks, np.arange(n))
    last = sizes[-1]
    expect = [(k - k % last) + (k % last + 1) % last for k in range(n)]
    np.testing.assert_array_equal(recv[:: TILE[0], 0], expect)


def test_fully_manual_mesh_compiles_no_fusion_for_the_coordinates():
    """The point of computing them natively: the only fusions left are the
    kernel's own float math (one add here), none for `axis_index`."""
    _, hlo = _check(jax.devices()[:8], ("x", "y"), (2, 4), LOGICAL)
    assert "partition-id" in hlo
    fused_ops = re.findall(r"op_name=\"[^\"]*axis_index[^\"]*\"", hlo)
    assert fused_ops == []


# Gathered over "x" of size 2: larger, the kernel races in on_wait mode
# (tests/production/test_production_findings.py).
@pytest.mark.parametrize("dims", [(2, 2), (2, 4)])
def test_two_axis_mesh_targets_compile_no_fusion(dims):
    """jax's own all_gather over one axis of a 2-D mesh names its neighbours
    by dict ids: each target's flat id (x * size_y + y) is a scalar program,
    not a fusion of XLA's (~6 ms of compile each), and the result is
    stock's, bit for bit."""
    from jax.experimental.pallas.ops.tpu import all_gather as ag
    from jax.sharding import NamedSharding

    n = dims[0] * dims[1]
    mesh = Mesh(np.array(jax.devices()[:n]).reshape(dims), ("x", "y"))
    x = jax.device_put(
        jnp.arange(8 * dims[0] * 128, dtype=jnp.float32).reshape(8 * dims[0], 128), NamedSharding(mesh, P("x"))
    )

    def run(params):
        f = jax.jit(lambda v: ag.all_gather(v, mesh=mesh, axis_name="x", memory_space=pltpu.VMEM))
        with (
            pltpu.force_tpu_interpret_mode(params)
            if isinstance(params, pltpu.InterpretParams)
            else (mosaic_rt.force_interpret_mode(params))
        ):
            compiled = f.lower(x).compile()
            return np.asarray(compiled(x)), compiled.as_text()

    ours, hlo = run(mosaic_rt.InterpretParams(wait_timeout=20))
    assert re.findall(r"= \S+ fusion\(", hlo) == []
    stock, _ = run(pltpu.InterpretParams())
    assert ours.tobytes() == stock.tobytes()


def test_pmap_axis_index_matches_stock():
    def run(params):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + lax.axis_index("i").astype(jnp.float32)

        call = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32), interpret=params)
        f = jax.pmap(call, axis_name="i", devices=jax.devices()[:4])
        x = jnp.arange(4 * TILE[0] * TILE[1], dtype=jnp.float32).reshape(4, *TILE)
        return np.asarray(f(x))

    stock = run(pltpu.InterpretParams())
    ours = run(mosaic_rt.InterpretParams(wait_timeout=20))
    assert ours.tobytes() == stock.tobytes()
    # Block k starts at x = k * 1024 and adds its index, k.
    np.testing.assert_array_equal(ours[:, 0, 0], [0, 1025, 2050, 3075])


def test_partially_manual_shard_map_is_a_clear_not_implemented_error():
    """Stock cannot run this either (its callbacks need every axis manual);
    ours says which axes are manual and what to pass instead of XLA's
    "Side-effect ops cannot be replicated" at compile time."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + lax.axis_index("x").astype(jnp.float32)

    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32), interpret=mosaic_rt.InterpretParams(wait_timeout=20)
    )
    mesh = Mesh(np.asarray(jax.devices()[:4]).reshape(2, 2), ("x", "y"))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), axis_names={"x"}, check_vma=False))
    x = jnp.zeros((2 * TILE[0], TILE[1]), jnp.float32)
    with pytest.raises(NotImplementedError, match=r"manual over \['x'\] of the mesh axes"):
        f(x)
