"""XLA FFI layer of mosaic_rt: native custom calls for every runtime op.

Importing this package registers every native handler with XLA once
(``jax.ffi.register_ffi_target(..., platform="cpu")``). The functions here
are called at *trace time* by the interpreter: each emits one token-threaded
``jax.ffi.ffi_call``; at run time XLA calls the Rust handler directly on the
device's thread, with no Python and no GIL involved.

Conventions shared by every op (see :mod:`mosaic_rt.ffi.ops`):

* operands come in the order ``token, handle, device, core, ...``;
* the token is an int32 scalar threaded through every call (returned first,
  aliased to the input) so each device's calls keep program order;
* ``handle`` is the ``uint32[2]`` returned by :func:`kernel_begin`, which
  joins a launch configured by a :class:`LaunchConfig`;
* ids and values are int32 scalars (x64 is off), ``-1`` means "not given";
* static parameters (shapes, strides, memory spaces, dtypes, modes) are
  Python values turned into FFI attributes.

Errors raised natively surface as ``jax.errors.JaxRuntimeError`` carrying a
``[mosaic_rt#N]`` marker; :func:`native_errors` / :func:`translate` turn them
back into the right Python exception type with the root cause.

Uses: `mosaic_rt._native`, `mosaic_rt.jax_internals`, `mosaic_rt.memory_spaces`,
`mosaic_rt.errors`, `mosaic_rt._dtypes`; never the interpreter (which uses this).
"""

from __future__ import annotations

import jax

from mosaic_rt import _native
from mosaic_rt.ffi import reports
from mosaic_rt.ffi.errors import fail_launch, native_errors, register_exception, translate
from mosaic_rt.ffi.launch_config import LaunchConfig
from mosaic_rt.ffi.ops import (
    DmaSide,
    DmaStart,
    DmaWait,
    TracedRegion,
    allocate_buffer,
    allocate_semaphores,
    barrier_semaphore,
    core_end,
    device_barrier,
    dma_start,
    dma_wait,
    fill,
    free_buffer,
    grid_step,
    kernel_begin,
    kernel_end,
    launch_info,
    leak_report,
    load,
    new_token,
    pending_reports,
    semaphore_read,
    semaphore_signal,
    semaphore_wait,
    store,
    swap,
    sync_device_cores,
)


def _register_targets() -> tuple[str, ...]:
    targets = _native.ffi_targets()
    for name, capsule in targets.items():
        jax.ffi.register_ffi_target(name, capsule, platform="cpu")
    return tuple(sorted(targets))


#: Names of the registered custom-call targets (all prefixed ``mosaic_rt_``).
TARGETS: tuple[str, ...] = _register_targets()

__all__ = [
    "DmaSide",
    "DmaStart",
    "DmaWait",
    "LaunchConfig",
    "TracedRegion",
    "TARGETS",
    "allocate_buffer",
    "allocate_semaphores",
    "barrier_semaphore",
    "core_end",
    "device_barrier",
    "dma_start",
    "dma_wait",
    "fill",
    "free_buffer",
    "grid_step",
    "kernel_begin",
    "kernel_end",
    "launch_info",
    "leak_report",
    "load",
    "fail_launch",
    "native_errors",
    "new_token",
    "pending_reports",
    "register_exception",
    "reports",
    "semaphore_read",
    "semaphore_signal",
    "semaphore_wait",
    "store",
    "swap",
    "sync_device_cores",
    "translate",
]
