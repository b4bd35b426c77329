"""Device ids: what a kernel's target ids name, and this device's own.
(The forms a kernel may pass are checked by `mosaic_rt.device_id_forms`.)

Uses: `mosaic_rt.jax_internals`, `mosaic_rt.ffi.ops` and
`interpret.native_compute` (a scalar program); imported by the evaluator
and the launch code.

Targets (`to_logical`, `wrap_negative`: a remote DMA's or signal's device
id -> (logical device, core)). A kernel names its target as pltpu does:
LOGICAL ids are flat device indices; MESH ids are tuples of mesh
coordinates or dicts {axis: index}, where a dict may also name the core
axis of a `core_map` (jax 0.12) or a tuple of mesh axes indexed by one
flattened index. Missing mesh axes of a dict keep this device's coordinate.
Negative ids behave as in stock interpret mode, which indexes its per-core
tables with the global core id `device * cores + core`: that id wraps once
(device -1 is the last device; core -1 of device 0 is the last core of the
last device). Out-of-range ids are checked natively at run time, where the
values are known.

This device (`this_device`: the traced device's mesh coordinates and
logical id, without an XLA fusion). `lax.axis_index` under a shard_map
lowers to `partition-id` followed by an unsigned divide / remainder /
convert, which XLA:CPU compiles as one fusion of its own in every
multi-device kernel, often its only fusion (its compile time:
benches/PERFORMANCE.md, "Native compute instead of XLA fusions"). When the
axis context is a fully manual mesh, the same arithmetic runs here as one
native scalar program over `partition-id` (the coordinates by jax's
formula: ``(partition_id // stride) % size``, strides over the mesh's later
axes). pmap falls back to `lax.axis_index` itself; a shard_map manual over
only some mesh axes is refused with a clear error (XLA cannot replicate our
side-effecting calls over the auto axes).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from mosaic_rt import jax_internals as jx
from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.interpret.native_compute.scalar_program import ProgramBuilder
from mosaic_rt.jax_internals import JAX_VERSION, DeviceIdType

# ----------------------------------------------------------------- targets

# jax 0.12 reads a dict key ("x",) as the axis "x"; earlier releases treat
# it as a one-axis group whose index wraps modulo the axis size.
_ONE_AXIS_TUPLE_IS_PLAIN = JAX_VERSION >= (0, 12)


def _short_description(device_id) -> str:
    # (the to_logical messages' form; `describe` is the checks')
    shape = getattr(device_id, "shape", None)
    if shape is not None and hasattr(device_id, "dtype"):
        return f"{type(device_id).__name__} of shape {tuple(shape)}"
    return repr(device_id)


def _from_dict(ids: dict, axis_sizes: dict, axis_indices: dict):
    """(mesh coordinates, {non-mesh axis: index}) of a dict device id."""
    names = list(axis_sizes)
    coords: dict = {}
    for axis, index in ids.items():
        if isinstance(axis, tuple) and len(axis) == 1 and _ONE_AXIS_TUPLE_IS_PLAIN:
            axis = axis[0]
        if isinstance(axis, tuple) and any(a in axis_sizes for a in axis):
            if not all(a in axis_sizes for a in axis):
                raise NotImplementedError(f"device_id axis group {axis} mixes mesh axes ({names}) with other axes")
            # One flattened index over the group, the last axis fastest.
            sizes = [axis_sizes[a] for a in axis]
            for k, a in enumerate(axis):
                coords[a] = (index // math.prod(sizes[k + 1 :])) % sizes[k]
        else:
            coords[axis] = index
    mesh = tuple(coords[a] if a in coords else axis_indices[a] for a in names)
    others = {a: i for a, i in coords.items() if a not in axis_sizes}
    return mesh, others


def to_logical(device_id, device_id_type, *, axis_sizes: dict, axis_indices: dict, core_axis_names=()):
    """(logical device id or None, core index or None) of a kernel's target."""
    if device_id is None:
        return None, None
    if device_id_type is DeviceIdType.LOGICAL or device_id_type == DeviceIdType.LOGICAL:
        if isinstance(device_id, (tuple, list, dict)):
            raise ValueError(
                f"A LOGICAL device_id must be one integer (a flat device index), got {_short_description(device_id)}."
            )
        return device_id, None
    if device_id_type != DeviceIdType.MESH:
        raise ValueError(
            f"Unsupported device_id_type {device_id_type!r}; expected DeviceIdType.MESH or DeviceIdType.LOGICAL."
        )
    names = list(axis_sizes)
    core = None
    if isinstance(device_id, dict):
        coords, others = _from_dict(device_id, axis_sizes, axis_indices)
        if others:
            if len(others) == 1 and set(others) <= set(core_axis_names):
                (core,) = others.values()
            else:
                raise ValueError(
                    f"Unrecognized axes in device_id: {others}. The mesh axes in"
                    f" scope are {names}"
                    + (f" and the core axis is {list(core_axis_names)}" if core_axis_names else "")
                    + "."
                )
    else:
        coords = device_id if isinstance(device_id, tuple) else (device_id,)
        if len(coords) != len(names):
            raise ValueError(
                f"A MESH device_id needs one coordinate per mesh axis {names}"
                f" ({len(names)}), got {len(coords)}: {_short_description(device_id)}."
                " Pass a dict {axis: index} to name only some axes, or"
                " device_id_type=DeviceIdType.LOGICAL for a flat index."
            )
    sizes = [axis_sizes[a] for a in names]
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    native = _flatten_natively(coords, strides)
    if native is not None:
        return native, core
    logical = 0
    for c, stride in zip(coords, strides):
        # No multiply by 1 or add of 0 in the program (XLA drops them, but
        # each costs lowering and compile time first).
        term = c if stride == 1 else c * stride
        logical = term if _is_zero(logical) else logical + term
    return logical, core


def _flatten_natively(coords, strides):
    """``sum(c * stride)`` of traced int32 coordinates by one scalar
    program, or None when no traced coordinate needs arithmetic (or one is
    not int32: jnp's promotion then decides, as before). In XLA this is a
    fusion of its own, compiled per distinct target, often the only fusion
    of a collective kernel (a 2-D mesh's neighbour)."""
    terms = [(c, s) for c, s in zip(coords, strides) if not _is_zero(c)]
    traced = [c for c, _ in terms if isinstance(c, jx.Tracer)]
    if not traced or (len(terms) == 1 and terms[0][1] == 1):
        return None
    if any(np.shape(c) != () or np.dtype(c.dtype) != _I32 for c in traced):
        return None
    if not all(isinstance(c, jx.Tracer) or isinstance(c, (int, np.integer)) for c, _ in terms):
        return None
    b = ProgramBuilder()
    total = None
    for c, stride in terms:
        ref = b.input(c, _I32) if isinstance(c, jx.Tracer) else b.const(int(c), _I32)
        if stride != 1:
            ref = b.op("mul", _I32, (ref, b.const(stride, _I32)))
        total = ref if total is None else b.op("add", _I32, (total, ref))
    return b.emit([total])[0]


def _is_zero(x) -> bool:
    return isinstance(x, int) and x == 0


def wrap_negative(device, core, *, num_devices: int, num_cores: int):
    """Stock's wrap of a negative target (see the module doc).

    `device` and `core` are int32 scalars (traced or not). Ids stay as
    given when the global core id is not negative, so the native range
    check sees (and names) the user's out-of-range value. Static ids are
    wrapped here; traced ones by one native call (no XLA kernels).
    """
    if isinstance(device, (int, np.integer)) and isinstance(core, (int, np.integer)):
        device, core = int(device), int(core)
        total = num_devices * num_cores
        g = device * num_cores + core
        if g < 0 and g + total >= 0:
            return (g + total) // num_cores, (g + total) % num_cores
        return device, core
    return ffi_ops.wrap_target(device, core, num_devices=num_devices, num_cores=num_cores)


# ------------------------------------------------------------- this device

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
        stride = math.prod(mesh_sizes[pos + 1 :])
        coord = b.op("rem", _U32, (b.op("div", _U32, (pid, b.const(stride, _U32))), b.const(mesh_sizes[pos], _U32)))
        index = b.op("convert_element_type", _I32, (coord,))
        indices.append(index)
        device_id = b.op("add", _I32, (b.op("mul", _I32, (device_id, b.const(size, _I32))), index))
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
            " leave axis_names out) to the shard_map around the kernel."
        )
    if any(mesh_axes.get(n) != s for n, s in zip(names, sizes)):
        return jx.lower_fun(lambda: _from_axis_index(names, sizes), multiple_results=True)(ctx)
    return jx.lower_fun(lambda: _native_coords(names, sizes, mesh_axes), multiple_results=True)(ctx)


_device_coords_p = jx.make_primitive(
    "mosaic_rt_device_coords", multiple_results=True, abstract_eval=_abstract_eval, lowering=_lowering
)
