"""DMA descriptors and semaphore operations for Pallas TPU kernels.

Drop-in for the matching names of `jax.experimental.pallas.tpu` (and
`pl.semaphore_*`): they bind the same JAX primitives with the same params, so
a kernel lowers to the identical Mosaic program on TPU and runs the same
under stock interpret mode and `mosaic_rt.InterpretParams()`. On top, invalid
descriptors, priorities and device-id forms fail early with clear messages,
and a descriptor that is never started or waited is reported.
"""

import os as _os

from jax._src import source_info_util as _source_info_util
from jax._src.pallas.mosaic.core import SemaphoreType
from jax._src.pallas.primitives import DeviceIdType

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
_source_info_util.register_exclusion(_os.path.dirname(__file__) + _os.sep)

__all__ = [
    "AsyncCopyDescriptor",
    "DeviceIdType",
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
