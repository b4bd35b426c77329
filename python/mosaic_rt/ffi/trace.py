"""FFI op of timelines: the grid-step marker (see :mod:`mosaic_rt.timeline`)."""

from __future__ import annotations

import jax.numpy as jnp

from mosaic_rt.ffi.ops import _call, _i32


def grid_step(token, handle, device, core, indices=(), *, phase: str = "begin"):
    """Marks the start (``phase="begin"``, with the step's grid ``indices``)
    or the end (``phase="end"``) of a grid step of (device, core) on the
    launch's timeline. A no-op unless the launch traces (``trace_path``);
    emit it only then, it still costs one custom call per step."""
    if phase not in ("begin", "end"):
        raise ValueError(f"phase must be 'begin' or 'end', got {phase!r}")
    if isinstance(indices, (tuple, list)):
        idx = (jnp.stack([_i32(i).reshape(()) for i in indices]) if indices
               else jnp.zeros((0,), jnp.int32))
    else:
        idx = jnp.asarray(indices, jnp.int32).reshape(-1)
    return _call("grid_step", (), (token, handle, _i32(device), _i32(core), idx), phase=phase)
