"""`pltpu.get_tpu_info()` on CPU answering for a chip.

Two settings make jax's TPU info registry answer for the CPU device kind
("cpu"), so kernels that size their blocks by chip (``get_tpu_info()
.vmem_capacity_bytes``, ``.num_lanes``...) trace on CPU as they would on
that chip, inside kernels and outside:

* a simulated chip (`mosaic_rt.simulate`: ``pytest --mosaic-rt=v7x``,
  `mosaic_rt.simulate_tpu`), which wins;
* else the compile check's process-wide target (``MOSAIC_RT_TPU_TARGET``,
  pytest's ``--mosaic-rt-tpu-target``, `set_default_target`): its first
  generation.

A kernel's own ``InterpretParams(tpu_target=)`` cannot do this: the kernel
body is traced before its params reach mosaic_rt. With neither, nothing is
registered; an entry someone else registered is left alone.
"""

from __future__ import annotations

import contextlib
import threading

from mosaic_rt.simulate.chips import CHIPS

# Generation -> (device kind the topology's devices report, cores per device).
DEVICE_KINDS = {name: (chip.device_kind, chip.cores_per_device) for name, chip in CHIPS.items()}
_CPU_KIND = "cpu"
_MARK = "_mosaic_rt_generation"
_state_lock = threading.RLock()
_target_generation: str | None = None  # the compile check's
_simulated: str | None = None  # a simulated run's (wins)


def info_for(generation: str):
    """jax's `TpuInfo` of one generation (no libtpu needed)."""
    from mosaic_rt import jax_internals as jx

    kind, cores = DEVICE_KINDS[generation]
    info = jx.pallas_tpu_info()
    return info.get_tpu_info_for_chip(info.chip_version_from_device_kind(kind), cores)


def _install(generation: str | None) -> None:
    """Our registry entry for ``generation`` (None: removes ours); an entry
    someone else registered is left alone."""
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
    jx.clear_tpu_info_cache()


def answer_on_cpu(generation: str | None) -> None:
    """The compile check's target: ``get_tpu_info()`` on CPU answers for
    ``generation`` unless a simulated chip says otherwise (``None``: no
    target)."""
    global _target_generation
    with _state_lock:
        _target_generation = generation
        _install(_simulated or _target_generation)


def simulate(generation: str | None) -> None:
    """A simulated run's chip (``None``: the run ended; the compile check's
    target, if any, answers again)."""
    global _simulated
    with _state_lock:
        _simulated = generation
        _install(_simulated or _target_generation)


_swap_lock = threading.Lock()


@contextlib.contextmanager
def answering_for(generation: str):
    """While compiling for ``generation``: `get_tpu_info()` on CPU answers for
    it. The Pallas TPU lowering re-enters the abstract mesh each equation was
    traced under -- for a kernel under a CPU `shard_map`, a mesh of CPU
    devices -- and some rules (`run_scoped` in `core_map`) then ask the chip
    of device kind "cpu". The entry in place before (the simulated chip's or
    the process target's, or none) comes back afterwards; someone else's
    entry is left alone."""
    from mosaic_rt import jax_internals as jx

    info = jx.pallas_tpu_info()
    with _swap_lock:
        before = info.registry.get(_CPU_KIND)
        ours = before is None or hasattr(before, _MARK)
        if ours:
            _install(generation)
        try:
            yield
        finally:
            if ours:
                if before is None:
                    _install(None)
                else:
                    info.registry[_CPU_KIND] = before
                    jx.clear_tpu_info_cache()
