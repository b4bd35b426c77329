"""`logging_mode`: log memory and semaphore operations through Python
`logging`, at the points stock interpret mode logs them.

Logging is a debugging aid the user opts into, so it is the one place where
the interpreter emits a host callback per operation (only when
`logging_mode` asks for that kind of operation). Lines go to the logger
`mosaic_rt.interpret` at INFO level, prefixed like stock's:
`Device {d}, core {c}: `{op}` -- ...`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt.ffi.ops import materialize
from mosaic_rt.jax_internals import LoggingMode, io_callback

logger = logging.getLogger("mosaic_rt.interpret")

_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)
_mode: contextvars.ContextVar = contextvars.ContextVar("mosaic_rt_logging_mode", default=None)

SHARED_MEMORY = LoggingMode.SHARED_MEMORY
SEMAPHORE = LoggingMode.SEMAPHORE


@contextlib.contextmanager
def tracing_with(logging_mode):
    """Sets the logging mode of the kernel being traced."""
    reset = _mode.set(logging_mode)
    try:
        yield
    finally:
        _mode.reset(reset)


def enabled(kind: LoggingMode) -> bool:
    mode = _mode.get()
    return mode is not None and bool(mode & kind)


def _emit(template: str, names: tuple[str, ...]):
    def log(token, device, core, *values):
        fields = ", ".join(f"{n}={np.asarray(v).tolist()}" for n, v in zip(names, values))
        for line in template.format(fields=fields).split("\n"):
            logger.info("Device %d, core %d: %s", int(device), int(core), line)
        return token

    return log


def log(token, kind: LoggingMode, op: str, device, core, **values):
    """Logs `op` with `values` (traced arrays) after the preceding op ran."""
    if not enabled(kind):
        return token
    names = tuple(values)
    return io_callback(
        _emit(f"`{op}` -- {{fields}}.", names),
        _TOKEN,
        materialize(token),
        device,
        core,
        *[jnp.asarray(v) for v in values.values()],
    )
