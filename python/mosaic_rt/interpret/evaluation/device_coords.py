"""The traced device's mesh coordinates and logical id, without an XLA fusion.

`lax.axis_index` under a shard_map lowers to `partition-id` followed by an
unsigned divide / remainder / convert, which XLA:CPU compiles as one fusion
of its own: ~6-10 ms of compile time in every multi-device kernel, often
its only fusion. When the axis context is a fully manual mesh, the same
arithmetic runs here as one native scalar program over `partition-id`
(the coordinates by jax's formula: ``(partition_id // stride) % size``,
strides over the mesh's later axes). pmap falls back to `lax.axis_index`
itself; a shard_map manual over only some mesh axes is refused with a clear
error (XLA cannot replicate our side-effecting calls over the auto axes).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.native_compute.scalar_program import ProgramBuilder

_I32 = np.dtype(np.int32)
_U32 = np.dtype(np.uint32)


def this_device(axis_sizes: dict) -> tuple[dict, object]:
    """``(axis_indices, device_id)`` of the device being traced: its index
    along each axis of ``axis_sizes`` (in scope, mesh order) and its logical
    id, the coordinates in row-major order (the last axis fastest)."""
    if not axis_sizes:
        return {}, jnp.zeros((), jnp.int32)
    names = tuple(axis_sizes)
    sizes = tuple(axis_sizes.values())
    device_id, *indices = _device_coords_p.bind(names=names, sizes=sizes)
    return dict(zip(names, indices)), device_id


def _abstract_eval(*, names, sizes):
    return [jx.ShapedArray((), _I32)] * (1 + len(names))


def _from_axis_index(names, sizes):
    """jax's own `axis_index` per axis, combined with plain integer ops."""
    indices = [lax.axis_index(n) for n in names]
    device_id = jnp.zeros((), jnp.int32)
    for size, index in zip(sizes, indices):
        device_id = device_id * size + jnp.asarray(index, jnp.int32)
    return [device_id, *indices]


def _native_coords(names, sizes, mesh_axes: dict):
    """The coordinates from `partition-id` by one scalar program."""
    mesh_names, mesh_sizes = list(mesh_axes), list(mesh_axes.values())
    b = ProgramBuilder()
    pid = b.input(jx.partition_id_p.bind(), _U32)
    device_id = b.const(0, _I32)
    indices = []
    for name, size in zip(names, sizes):
        pos = mesh_names.index(name)
        stride = math.prod(mesh_sizes[pos + 1:])
        coord = b.op("rem", _U32, (b.op("div", _U32, (pid, b.const(stride, _U32))),
                                   b.const(mesh_sizes[pos], _U32)))
        index = b.op("convert_element_type", _I32, (coord,))
        indices.append(index)
        device_id = b.op("add", _I32, (b.op("mul", _I32, (device_id, b.const(size, _I32))),
                                       index))
    return b.emit([device_id, *indices])


def _lowering(ctx, *, names, sizes):
    shard_map = jx.shard_map_axes(ctx)
    if shard_map is None:  # pmap: jax's own axis_index
        return jx.lower_fun(lambda: _from_axis_index(names, sizes), multiple_results=True)(ctx)
    mesh_axes, manual = shard_map
    if len(manual) != len(mesh_axes):
        # XLA would reject the kernel's side-effecting calls much later with
        # "Side-effect ops cannot be replicated"; say what to change instead.
        raise NotImplementedError(
            f"mosaic_rt runs a pallas_call under shard_map only when the shard_map is"
            f" manual over every mesh axis; this one is manual over {list(manual)} of"
            f" the mesh axes {list(mesh_axes)}. Pass axis_names={set(mesh_axes)} (or"
            " leave axis_names out) to the shard_map around the kernel.")
    if any(mesh_axes.get(n) != s for n, s in zip(names, sizes)):
        return jx.lower_fun(lambda: _from_axis_index(names, sizes), multiple_results=True)(ctx)
    return jx.lower_fun(lambda: _native_coords(names, sizes, mesh_axes),
                        multiple_results=True)(ctx)


_device_coords_p = jx.make_primitive("mosaic_rt_device_coords", multiple_results=True,
                                     abstract_eval=_abstract_eval, lowering=_lowering)
