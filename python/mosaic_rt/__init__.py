"""mosaic_rt: run unmodified Pallas TPU kernels on CPU at native speed."""

from mosaic_rt.errors import (
    DeadlockError,
    KernelAborted,
    MosaicRuntimeError,
    SemaphoreLeakError,
    WaitTimeout,
)
from mosaic_rt.runtime import BufferInfo, Leak, Runtime

__version__ = "0.1.0"

__all__ = [
    "BufferInfo",
    "Leak",
    "Runtime",
    "DeadlockError",
    "KernelAborted",
    "MosaicRuntimeError",
    "SemaphoreLeakError",
    "WaitTimeout",
]
