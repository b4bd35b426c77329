"""Device ids: the forms a kernel may pass to a remote DMA or signal, and
their check (`check_device_id`, which `mosaic_rt.tpu` runs before a call
binds anything). Mosaic accepts more forms than it can lower sensibly (a
bare scalar under MESH only works by accident on 1-D meshes; a tuple under
LOGICAL trips an assert). We reject the ambiguous forms up front with a
message that says which form each id type needs. (What an id names is the
interpreter's: `interpret.evaluation.device_ids`.)

Uses: the installed pallas, `mosaic_rt.jax_internals`.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from jax.experimental import pallas as pl

from mosaic_rt.jax_internals import DeviceIdType

# jax 0.12 deprecated `device_id_type` (its default became None, meaning MESH).
_TYPE_PARAM = inspect.signature(pl.semaphore_signal).parameters.get("device_id_type")
DEVICE_ID_TYPE_DEPRECATED = _TYPE_PARAM is None or _TYPE_PARAM.default is None

_MESH_FORM = "MESH device ids are tuples of mesh coordinates, e.g. (i, j), or dicts {axis_name: index}"
_LOGICAL_FORM = "LOGICAL device ids are scalar integers"


def is_integer_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    return shape == () and dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)


def describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return f"{type(value).__name__} {value!r}"


def _check_coordinate(coordinate: Any, where: str) -> None:
    if not is_integer_scalar(coordinate):
        raise TypeError(f"{where} must be an integer scalar, got {describe(coordinate)}.")


def effective_type(device_id_type: Any) -> Any:
    """The id type a stock call uses for the `device_id_type` argument."""
    if device_id_type is None and DEVICE_ID_TYPE_DEPRECATED:
        return DeviceIdType.MESH
    return device_id_type


def check_device_id(device_id: Any, device_id_type: Any) -> None:
    """Raises if `device_id` is not a valid id of `device_id_type`.

    `None` (a local operation) is always valid.
    """
    if not isinstance(device_id_type, DeviceIdType):
        raise TypeError(f"device_id_type must be DeviceIdType.MESH or DeviceIdType.LOGICAL, got {device_id_type!r}.")
    if device_id is None:
        return
    if device_id_type is DeviceIdType.LOGICAL:
        if isinstance(device_id, (tuple, list, dict)):
            raise ValueError(
                f"{_LOGICAL_FORM}; got a {type(device_id).__name__}. Pass"
                " device_id_type=DeviceIdType.MESH for mesh coordinates."
            )
        _check_coordinate(device_id, "A LOGICAL device id")
        return
    if isinstance(device_id, tuple):
        for position, coordinate in enumerate(device_id):
            _check_coordinate(coordinate, f"Mesh coordinate {position} of device_id")
        return
    if isinstance(device_id, dict):
        for axis, coordinate in device_id.items():
            _check_coordinate(coordinate, f"device_id[{axis!r}]")
        return
    hint = (
        "Wrap it as (id,) or {axis_name: id}."
        if DEVICE_ID_TYPE_DEPRECATED
        else "Wrap it as (id,) or pass device_id_type=DeviceIdType.LOGICAL for a flat device index."
    )
    raise ValueError(f"{_MESH_FORM}; got {describe(device_id)}. {hint}")
