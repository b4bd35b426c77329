"""What every layer of the interpreter shares: `Ctx`, the trace-time facts
about the core whose program is being emitted, and `semaphore_kind`, the
core's kind of a semaphore allocation.

Memory spaces are converted by `mosaic_rt.memory_spaces`, not here.

Uses: `mosaic_rt.jax_internals` and `interpret.params` only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.params import InterpretParams


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ctx:
    """Trace-time facts about the core whose program is being emitted."""

    handle: Any  # runtime handle (traced) from `native_calls.launch_begin`
    device_id: Any  # logical device id (traced int32)
    core: Any  # local core id (int or traced int32); None: the launch's
    grid_point: Any = None
    grid_mapping: jx.GridMapping
    mesh: Any
    axis_sizes: dict
    axis_indices: dict
    mosaic_params: jx.CompilerParams
    params: InterpretParams
    num_devices: int = 1
    # Semaphore ids of the equation being evaluated, looked up by a scalar
    # program already (by operand role: "dst"/"src" of a DMA start, "sem").
    sem_ids: dict | None = None
    # The DMA waits right after the equation being evaluated (a DMA start or
    # wait), as ``(sem, nbytes, site)``: its native op runs them too.
    then_wait: tuple = ()
    # The block's broadcast-scalar values and used results: an
    # `evaluation.splat.BlockStores`, set by the evaluator per block.
    stores: Any = None
    # Whether the block's environment takes a load's value pending in a
    # batch (`batching.Lazy`): set by the evaluator per block.
    lazy_loads: bool = False
    # Buffers the block's `jax.empty_ref` / `jax.new_ref` equations made,
    # as ``(space code, buffer)``: freed when the block ends. A list of
    # the block's own, set by the evaluator per block.
    block_refs: list | None = None

    def replace(self, **changes) -> "Ctx":
        return dataclasses.replace(self, **changes)


def semaphore_kind(aval) -> str:
    """The core's kind of a semaphore allocation of type `aval`."""
    dtype = getattr(aval, "dtype", None)
    try:
        if jnp.issubdtype(dtype, jx.mosaic_core.dma_semaphore):
            return "dma"
        if jnp.issubdtype(dtype, jx.pallas_core.barrier_semaphore):
            return "barrier"
    except TypeError:
        pass
    return "regular"
