"""Semaphore operations binding the same primitives as `pl.semaphore_*` and
`pltpu.get_barrier_semaphore`, with the device id checked before binding."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax._src import state
from jax._src import tree_util
from jax._src.pallas import primitives as pallas_primitives
from jax._src.pallas.mosaic.primitives import get_barrier_semaphore_p
from jax._src.pallas.primitives import DeviceIdType

from mosaic_rt.tpu._device_ids import describe, is_integer_scalar, check_device_id


def _ref_and_transforms(sem_or_view):
    # A view (sems.at[i]) carries its indexing as transforms of the base ref.
    if isinstance(sem_or_view, state.TransformedRef):
        return sem_or_view.ref, sem_or_view.transforms
    return sem_or_view, ()


def semaphore_signal(sem_or_view, inc: int | Any = 1, *, device_id: Any = None,
                     device_id_type: DeviceIdType = DeviceIdType.MESH,
                     core_index: int | Any | None = None) -> None:
    """Adds `inc` to a semaphore, on device `device_id` / core `core_index`
    when given (else on this one)."""
    check_device_id(device_id, device_id_type)
    if core_index is not None and not is_integer_scalar(core_index):
        raise TypeError(
            f"core_index must be an integer scalar, got {describe(core_index)}.")
    ref, transforms = _ref_and_transforms(sem_or_view)
    operands = [ref, transforms, jnp.asarray(inc, dtype=jnp.int32), device_id,
                core_index]
    flat, args_tree = tree_util.tree_flatten(operands)
    pallas_primitives.semaphore_signal_p.bind(
        *flat, args_tree=args_tree, device_id_type=device_id_type)


def semaphore_wait(sem_or_view, value: int | Any = 1, *,
                   decrement: bool = True) -> None:
    """Blocks until the semaphore reaches `value`, then subtracts it (unless
    `decrement=False`)."""
    if not isinstance(decrement, bool):
        raise TypeError(f"`decrement` must be a bool, got {decrement!r}.")
    ref, transforms = _ref_and_transforms(sem_or_view)
    operands = [ref, transforms, jnp.asarray(value, dtype=jnp.int32), decrement]
    flat, args_tree = tree_util.tree_flatten(operands)
    pallas_primitives.semaphore_wait_p.bind(*flat, args_tree=args_tree)


def semaphore_read(sem_or_view):
    """Returns the semaphore's current value as an int32 scalar."""
    ref, transforms = _ref_and_transforms(sem_or_view)
    flat, args_tree = tree_util.tree_flatten([ref, transforms])
    return pallas_primitives.semaphore_read_p.bind(*flat, args_tree=args_tree)


def get_barrier_semaphore():
    """Returns the barrier semaphore shared by all kernels with this
    pallas_call's `collective_id` (it must be waited back down to 0)."""
    return get_barrier_semaphore_p.bind()
