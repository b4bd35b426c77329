"""mosaic_rt: run unmodified Pallas TPU kernels on CPU at native speed."""

from mosaic_rt.errors import (
    DeadlockError,
    KernelAborted,
    MosaicRuntimeError,
    SemaphoreLeakError,
    WaitTimeout,
)

__version__ = "0.1.0"

__all__ = [
    "DeadlockError",
    "KernelAborted",
    "MosaicRuntimeError",
    "SemaphoreLeakError",
    "WaitTimeout",
]
