"""Semaphore operations: `pl.semaphore_*` and `pltpu.get_barrier_semaphore`
of the installed release, called after our checks (device id, core index,
`decrement`, barrier tag)."""

from __future__ import annotations

from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mosaic_rt.device_id_forms import check_device_id, describe, effective_type, is_integer_scalar
from mosaic_rt.tpu._stock import mirror


@mirror(pl.semaphore_signal)
def semaphore_signal(call):
    """Adds `inc` to a semaphore, on device `device_id` / core `core_index`
    when given (else on this one)."""
    check_device_id(call["device_id"], effective_type(call["device_id_type"]))
    core_index = call["core_index"]
    if core_index is not None and not is_integer_scalar(core_index):
        raise TypeError(f"core_index must be an integer scalar, got {describe(core_index)}.")
    return call.run()


@mirror(pl.semaphore_wait)
def semaphore_wait(call):
    """Blocks until the semaphore reaches `value`, then subtracts it (unless
    `decrement=False`)."""
    if not isinstance(call["decrement"], bool):
        raise TypeError(f"`decrement` must be a bool, got {call['decrement']!r}.")
    return call.run()


@mirror(pl.semaphore_read)
def semaphore_read(call):
    """Returns the semaphore's current value as an int32 scalar."""
    return call.run()


@mirror(pltpu.get_barrier_semaphore)
def get_barrier_semaphore(call):
    """Returns the barrier semaphore of this pallas_call's `collective_id`
    (or, on jax >= 0.11.2, of `tag`); it must be waited back down to 0."""
    tag = call["tag"]  # None before 0.11.2, which has no `tag`
    try:
        hash(tag)
    except TypeError:
        raise TypeError(
            "get_barrier_semaphore's `tag` must be hashable (e.g. an int, str"
            f" or tuple), got {type(tag).__name__} {tag!r}."
        ) from None
    return call.run()
