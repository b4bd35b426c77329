"""Device ids of remote DMAs and signals -> (logical device, core).

A kernel names its target as pltpu does: LOGICAL ids are flat device
indices; MESH ids are tuples of mesh coordinates or dicts {axis: index},
where a dict may also name the core axis of a `core_map` (jax 0.12) or a
tuple of mesh axes indexed by one flattened index. Missing mesh axes of a
dict keep this device's coordinate.

Negative ids behave as in stock interpret mode, which indexes its per-core
tables with the global core id `device * cores + core`: that id wraps once
(device -1 is the last device; core -1 of device 0 is the last core of the
last device). Out-of-range ids are checked natively at run time, where the
values are known.
"""

from __future__ import annotations

import math

import numpy as np

from mosaic_rt.ffi import ops as ffi_ops
from mosaic_rt.jax_internals import JAX_VERSION, DeviceIdType

# jax 0.12 reads a dict key ("x",) as the axis "x"; earlier releases treat
# it as a one-axis group whose index wraps modulo the axis size.
_ONE_AXIS_TUPLE_IS_PLAIN = JAX_VERSION >= (0, 12)


def _describe(device_id) -> str:
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
                raise NotImplementedError(
                    f"device_id axis group {axis} mixes mesh axes ({names}) with"
                    " other axes")
            # One flattened index over the group, the last axis fastest.
            sizes = [axis_sizes[a] for a in axis]
            for k, a in enumerate(axis):
                coords[a] = (index // math.prod(sizes[k + 1:])) % sizes[k]
        else:
            coords[axis] = index
    mesh = tuple(coords[a] if a in coords else axis_indices[a] for a in names)
    others = {a: i for a, i in coords.items() if a not in axis_sizes}
    return mesh, others


def to_logical(device_id, device_id_type, *, axis_sizes: dict, axis_indices: dict,
               core_axis_names=()):
    """(logical device id or None, core index or None) of a kernel's target."""
    if device_id is None:
        return None, None
    if device_id_type is DeviceIdType.LOGICAL or device_id_type == DeviceIdType.LOGICAL:
        if isinstance(device_id, (tuple, list, dict)):
            raise ValueError(
                "A LOGICAL device_id must be one integer (a flat device index),"
                f" got {_describe(device_id)}.")
        return device_id, None
    if device_id_type != DeviceIdType.MESH:
        raise ValueError(f"Unsupported device_id_type {device_id_type!r}; expected"
                         " DeviceIdType.MESH or DeviceIdType.LOGICAL.")
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
                    + (f" and the core axis is {list(core_axis_names)}"
                       if core_axis_names else "") + ".")
    else:
        coords = device_id if isinstance(device_id, tuple) else (device_id,)
        if len(coords) != len(names):
            raise ValueError(
                f"A MESH device_id needs one coordinate per mesh axis {names}"
                f" ({len(names)}), got {len(coords)}: {_describe(device_id)}."
                " Pass a dict {axis: index} to name only some axes, or"
                " device_id_type=DeviceIdType.LOGICAL for a flat index.")
    sizes = [axis_sizes[a] for a in names]
    logical = 0
    for k, c in enumerate(coords):
        # No multiply by 1 or add of 0 in the program (XLA drops them, but
        # each costs lowering and compile time first).
        stride = math.prod(sizes[k + 1:])
        term = c if stride == 1 else c * stride
        logical = term if _is_zero(logical) else logical + term
    return logical, core


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
