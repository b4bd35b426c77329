"""`pltpu.get_tpu_info()` on CPU answering for the process's TPU target.

With a process-wide target (``MOSAIC_RT_TPU_TARGET``, pytest's
``--mosaic-rt-tpu-target``, `set_default_target`), jax's TPU info registry
gets an entry for the CPU device kind that answers for the first target
generation, so kernels that size their blocks by chip (``get_tpu_info()
.vmem_capacity_bytes``, ``.num_lanes``...) trace on CPU as they would on
that chip, inside kernels and outside. A kernel's own
``InterpretParams(tpu_target=)`` cannot do this: the kernel body is traced
before its params reach mosaic_rt. Without a target, nothing is registered.
"""

from __future__ import annotations

import contextlib
import threading

# Generation -> (device kind the topology's devices report, cores per device).
DEVICE_KINDS = {
    "v4": ("TPU v4", 1),
    "v5e": ("TPU v5 lite", 1),
    "v5p": ("TPU v5", 2),
    "v6e": ("TPU v6 lite", 1),
    "v7x": ("TPU7x", 1),
}
_CPU_KIND = "cpu"
_MARK = "_mosaic_rt_generation"


def info_for(generation: str):
    """jax's `TpuInfo` of one generation (no libtpu needed)."""
    from mosaic_rt import jax_internals as jx

    kind, cores = DEVICE_KINDS[generation]
    info = jx.pallas_tpu_info()
    return info.get_tpu_info_for_chip(info.chip_version_from_device_kind(kind), cores)


def answer_on_cpu(generation: str | None) -> None:
    """Makes ``get_tpu_info()`` on CPU answer for ``generation`` (``None``:
    removes our entry; an entry someone else registered is left alone)."""
    from mosaic_rt import jax_internals as jx

    info = jx.pallas_tpu_info()
    registry = info.registry
    current = registry.get(_CPU_KIND)
    if generation is None:
        if current is not None and hasattr(current, _MARK):
            del registry[_CPU_KIND]
    elif current is None or hasattr(current, _MARK):

        def answer():
            return info_for(generation)

        setattr(answer, _MARK, generation)
        registry[_CPU_KIND] = answer
    else:
        return
    clear = getattr(info.get_tpu_info, "cache_clear", None)
    if clear is not None:
        clear()


_swap_lock = threading.Lock()


@contextlib.contextmanager
def answering_for(generation: str):
    """While compiling for ``generation``: `get_tpu_info()` on CPU answers for
    it. The Pallas TPU lowering re-enters the abstract mesh each equation was
    traced under -- for a kernel under a CPU `shard_map`, a mesh of CPU
    devices -- and some rules (`run_scoped` in `core_map`) then ask the chip
    of device kind "cpu". The entry in place before (the process target's,
    or none) comes back afterwards; someone else's entry is left alone."""
    from mosaic_rt import jax_internals as jx

    info = jx.pallas_tpu_info()
    with _swap_lock:
        before = info.registry.get(_CPU_KIND)
        ours = before is None or hasattr(before, _MARK)
        if ours:
            answer_on_cpu(generation)
        try:
            yield
        finally:
            if ours:
                if before is None:
                    answer_on_cpu(None)
                else:
                    info.registry[_CPU_KIND] = before
                    clear = getattr(info.get_tpu_info, "cache_clear", None)
                    if clear is not None:
                        clear()
