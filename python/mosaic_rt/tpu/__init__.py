"""DMA descriptors and semaphore operations for Pallas TPU kernels.

Drop-in for the matching names of `jax.experimental.pallas.tpu` (and
`pl.semaphore_*`) of the installed jax, with the same signatures: each call
goes to the stock function after our checks, so a kernel lowers to the
identical Mosaic program on TPU and runs the same under stock interpret mode
and `mosaic_rt.InterpretParams()`. On top, invalid descriptors, priorities
and device-id forms fail early with clear messages, and a descriptor that is
never started or waited is reported with the line that created it.

Uses: the installed `pltpu`, `mosaic_rt.jax_internals` and
`mosaic_rt.device_id_forms` (the device-id forms and their check); never the
interpreter.
"""

import functools as _functools
import os as _os
import warnings as _warnings

from jax.experimental import pallas as _pl
from jax.experimental.pallas.tpu import SemaphoreType

from mosaic_rt import device_id_forms as _device_id_forms
from mosaic_rt import jax_internals as _jax_internals
from mosaic_rt.tpu.dma import (
    AsyncCopyDescriptor,
    UnusedAsyncCopyWarning,
    async_copy,
    async_remote_copy,
    make_async_copy,
    make_async_remote_copy,
)
from mosaic_rt.tpu.semaphores import (
    get_barrier_semaphore,
    semaphore_read,
    semaphore_signal,
    semaphore_wait,
)

# Our wrapper frames are not the user's code: exclude them so op locations
# (in jaxprs, errors and the Mosaic body) point at the kernel line, exactly as
# with pltpu, which makes the lowered bodies byte-identical.
_jax_internals.register_source_exclusion(_os.path.dirname(__file__) + _os.sep)
# So are the device-id checks these wrappers run: a failed check points at
# the kernel line too.
_jax_internals.register_source_exclusion(_device_id_forms.__file__)

__all__ = [
    "AsyncCopyDescriptor",
    "SemaphoreType",
    "UnusedAsyncCopyWarning",
    "async_copy",
    "async_remote_copy",
    "get_barrier_semaphore",
    "make_async_copy",
    "make_async_remote_copy",
    "semaphore_read",
    "semaphore_signal",
    "semaphore_wait",
]

# `pl.DeviceIdType` is deprecated from jax 0.12 on (with `device_id_type`):
# ours then warns the same way and leaves `__all__`.
_DEVICE_ID_TYPE_DEPRECATION = _jax_internals.stock_deprecation(_pl, "DeviceIdType")
if _DEVICE_ID_TYPE_DEPRECATION is None:
    DeviceIdType = _jax_internals.DeviceIdType
    __all__.append("DeviceIdType")


@_functools.cache  # warns once per process, as jax's own deprecated names do
def __getattr__(name):
    if name == "DeviceIdType" and _DEVICE_ID_TYPE_DEPRECATION is not None:
        _warnings.warn(_DEVICE_ID_TYPE_DEPRECATION, DeprecationWarning, stacklevel=2)
        return _jax_internals.DeviceIdType
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
