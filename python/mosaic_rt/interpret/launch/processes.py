"""Launches whose mesh spans processes (multi-controller JAX): which
process owns each device, and whether the kernel needs the others.

Trace-time only. pallas_call's lowering (`seam`) records the process of
each mesh device while the kernel is lowered (`lowering_in`); the launch
passes it to the runtime as `device_processes`, and when the kernel may
talk to devices of other processes (a DMA or signal with a device id, a
barrier semaphore), attaches this process to the others first
(`mosaic_rt.distributed.attach`, the one importer of mpi4py) -- or fails
at once, on every process, naming the install line.
"""

from __future__ import annotations

import contextlib
import contextvars

from jax import tree_util

from mosaic_rt import jax_internals as jx

_PROCESSES: contextvars.ContextVar[tuple[int, ...] | None] = contextvars.ContextVar(
    "mosaic_rt_mesh_processes", default=None
)

# Primitives that may reach another device, and where their device id is.
_REMOTE = {
    jx.dma_start_p: lambda tree, args: tree_util.tree_unflatten(tree, args)[-1],
    jx.semaphore_signal_p: lambda tree, args: tree_util.tree_unflatten(tree, args)[3],
}


@contextlib.contextmanager
def lowering_in(ctx):
    """Records the processes of the mesh of lowering context ``ctx``."""
    token = _PROCESSES.set(jx.mesh_processes(ctx))
    try:
        yield
    finally:
        _PROCESSES.reset(token)


def device_processes(num_devices: int, jaxpr) -> tuple[int, ...] | None:
    """The process of each of the launch's ``num_devices`` devices when they
    span several processes (attaching this process to the others if the
    kernel may need them), else None."""
    owners = _PROCESSES.get()
    if owners is None or len(set(owners)) < 2:
        return None
    if len(owners) != num_devices:
        raise ValueError(
            f"the kernel runs on {num_devices} device(s) but its mesh has {len(owners)}: a launch spanning "
            "processes needs a shard_map over the whole mesh"
        )
    if talks_to_other_devices(jaxpr):
        from mosaic_rt import distributed

        distributed.attach(reason=f"this kernel's mesh spans {len(set(owners))} processes")
    return owners


def talks_to_other_devices(jaxpr) -> bool:
    """Whether the kernel has a DMA or signal with a device id, or a barrier
    semaphore (conservative: an unreadable equation counts)."""
    for eqn in jx.all_equations(jaxpr):
        if eqn.primitive is jx.get_barrier_semaphore_p:
            return True
        where = _REMOTE.get(eqn.primitive)
        if where is None:
            continue
        tree = eqn.params.get("args_tree", eqn.params.get("tree"))
        try:
            if where(tree, list(eqn.invars)) is not None:
                return True
        except Exception:  # noqa: BLE001 - an unknown layout: assume it may
            return True
    return False


def per_process_path(path) -> str:
    """``trace.json`` -> ``trace.p<this process>.json``."""
    import os

    import jax

    root, ext = os.path.splitext(os.fspath(path))
    return f"{root}.p{jax.process_index()}{ext or '.json'}"
