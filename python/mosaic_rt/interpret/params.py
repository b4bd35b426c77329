"""`mosaic_rt.InterpretParams`: stock TPU interpret parameters plus our own.

It subclasses jax's `pltpu.InterpretParams`, so every stock field keeps its
name, default, meaning and validation, and everything in jax that checks
`isinstance(interpret, pltpu.InterpretParams)` (effects, `core_map`,
`force_tpu_interpret_mode`) treats it as TPU interpret mode. The seam
(`mosaic_rt.interpret.launch.seam`) routes only instances of this class to our
interpreter; stock instances keep the stock path.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from mosaic_rt.ffi.launch_config import LaunchConfig
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import StockInterpretParams as _StockParams

_LAUNCH = LaunchConfig()


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterpretParams(_StockParams):
    """Parameters for running Pallas TPU kernels on mosaic_rt's native runtime.

    Accepts every field of the installed jax's ``pltpu.InterpretParams``
    (see its docstring) plus:

    Attributes:
      dma_execution_mode: when a DMA moves its bytes: ``"tpu"`` (default:
        as on a TPU -- a copy within the issuing core at its start, in the
        order copies are issued; a copy to another core, remote or on the
        same device, reads its source at its start and lands at the
        destination core's next synchronisation point: a semaphore or DMA
        wait, a semaphore read, the block copies between grid steps, a
        buffer free or the end of its program, never between two of its
        loads and stores), ``"eager"`` (every copy at its start, whichever
        core it goes to; one into a buffer its destination device has not
        allocated yet -- a sender ahead of a device that has not reached
        the kernel -- lands at that core's next synchronisation point) or ``"on_wait"`` (stock's default: deferred until
        something waits on its semaphore -- the latest moment a kernel may
        rely on, which shows kernels that read a DMA's destination, or
        reuse its source, before waiting for it). A kernel without races
        gets the same results in all three.
      out_of_bounds_reads: what a read outside its buffer does: ``"tpu"``
        (default: as a TPU -- the kernel's own loads of VMEM and SMEM are
        not bounds checked: the part outside reads as uninitialized memory,
        see ``uninitialized_memory``, and the load is reported once per
        source line as misuse, see ``python_warnings``; a DMA reading
        outside its source fails with ``IndexError``, as a TPU's DMA engine
        checks), ``"raise"`` (stock's default: every such read fails with
        ``IndexError``) or ``"uninitialized"`` (stock: every such read, DMAs
        too, reads uninitialized memory, silently).
      on_race: with ``detect_races=True``, what a data race does: ``"raise"``
        (the kernel fails with ``mosaic_rt.RaceError`` at the first race)
        or ``"warn"`` (reported, see ``python_warnings``). jax 0.12+ has this
        field with default ``"raise"``; on older jax, whose stock
        interpreter only prints races, the default is ``"warn"``.
      python_warnings: how reports that do not fail the kernel (races with
        ``on_race="warn"``, semaphore leaks with ``on_semaphore_leak="warn"``,
        misuse) reach you. ``False``: as the installed jax's stock
        interpreter reports the same event -- races printed (jax < 0.12) or
        logged as warnings (jax >= 0.12, logger ``mosaic_rt.races``), leaks
        printed, misuse logged (logger ``mosaic_rt``) -- so no Python
        warning is issued that stock does not issue. ``True``: as Python
        warnings (``mosaic_rt.RaceWarning``, ``SemaphoreLeakWarning``,
        ``MisuseWarning``), issued before the kernel's results are ready,
        in the caller's warning context (``pytest.warns``,
        ``warnings.catch_warnings``). ``None`` (default): the process
        setting -- ``MOSAIC_RT_WARNINGS=1`` in the environment, or pytest's
        ``--mosaic-rt-warnings`` / ini ``mosaic_rt_warnings`` -- else
        ``False``. Read when the kernel is traced.
      detect_uninitialized: check every read of kernel-local memory (VMEM,
        SMEM, scratch) and fail with ``mosaic_rt.UninitializedReadError``
        naming the buffer, the never-written index range and the source line
        when it reads elements nothing wrote in this launch (stock only
        fills such memory with NaN or zero, see ``uninitialized_memory``).
      trace_path: write each launch's timeline (grid steps, DMAs, waits,
        signals, with source lines) as Chrome trace-event JSON to this path
        (later launches: ``name-1.json``, ``name-2.json``, ...; see
        ``mosaic_rt.timeline``); ``None``: no timeline.
      detect_deadlocks: when every core of a launch is blocked and nothing
        pending can wake any of them, fail every wait at once with
        ``mosaic_rt.DeadlockError`` listing each blocked core (semaphore,
        value awaited, count, source line) instead of waiting for
        ``wait_timeout``. A device that never reaches the kernel is judged
        stuck only after the whole process has been idle for ~0.8 s.
      wait_timeout: seconds after which a blocked semaphore/DMA wait or
        barrier fails with ``mosaic_rt.WaitTimeout`` instead of hanging
        (``None``: no timeout).
      on_semaphore_leak: what to do when a semaphore has a non-zero count at
        kernel exit: ``"warn"`` (reported, see ``python_warnings``), ``"raise"``
        (``mosaic_rt.SemaphoreLeakError``) or ``"ignore"``.
      tpu_target: also compile every kernel for these TPU generations with
        the real TPU compiler, on CPU (needs libtpu, see
        ``mosaic_rt.tpu_check``): one of ``"v4"``, ``"v5e"``, ``"v5p"``,
        ``"v6e"``, ``"v7x"`` (alias ``"tpu7x"``) or a tuple of them; a
        kernel that does not compile fails with
        ``mosaic_rt.TpuCompileError``. ``None`` (default): the process
        setting (``MOSAIC_RT_TPU_TARGET=v5e,v6e``, pytest's
        ``--mosaic-rt-tpu-target``); ``()``: no check.
      tpu_check: what a kernel that does not compile for a ``tpu_target``
        does: ``"raise"`` (``TpuCompileError``) or ``"warn"``
        (``mosaic_rt.TpuCompileWarning``, issued when the kernel is
        traced). ``None`` (default): ``MOSAIC_RT_TPU_CHECK`` / pytest's
        ``--mosaic-rt-tpu-check``, else ``"raise"``.
    """

    # The launch options' defaults are the launch configuration's (one
    # definition: mosaic_rt.ffi.launch_config, where they are explained).
    dma_execution_mode: Literal["tpu", "eager", "on_wait"] = _LAUNCH.dma_execution_mode
    out_of_bounds_reads: Literal["raise", "uninitialized", "tpu"] = _LAUNCH.out_of_bounds_reads
    if not STOCK_HAS_ON_RACE:
        on_race: Literal["raise", "warn"] = _LAUNCH.on_race
    python_warnings: bool | None = _LAUNCH.python_warnings
    detect_uninitialized: bool = _LAUNCH.detect_uninitialized
    detect_deadlocks: bool = _LAUNCH.detect_deadlocks
    trace_path: str | None = _LAUNCH.trace_path
    wait_timeout: float | None = _LAUNCH.wait_timeout
    on_semaphore_leak: Literal["warn", "raise", "ignore"] = "warn"
    tpu_target: str | tuple[str, ...] | None = None
    tpu_check: Literal["raise", "warn"] | None = None
    # Not API: off, a kernel is emitted the plainer way, so tests and probes
    # can compare programs and results in one process. _batch_runs:
    # straight-line runs of native ops as one `batch` call each
    # (`ffi.ops.batched_runs`); _vector_runs: elementwise compute as native
    # vector programs (`native_compute.vector_runs`), else XLA fusions.
    _batch_runs: bool = True
    _vector_runs: bool = True

    def __post_init__(self):
        super().__post_init__()
        launch_config(self, num_devices=1)  # checks the launch options
        if self.buffer_bounds not in ("logical", "padded"):
            raise ValueError(f"buffer_bounds must be 'logical' or 'padded', got {self.buffer_bounds!r}.")
        if self.on_semaphore_leak not in ("warn", "raise", "ignore"):
            raise ValueError(f"on_semaphore_leak must be 'warn', 'raise' or 'ignore', got {self.on_semaphore_leak!r}.")
        # tpu_target / tpu_check: see mosaic_rt.tpu_check (normalised there
        # when a kernel is lowered; checked here so a typo fails at once).
        from mosaic_rt.tpu_check.targets import validate_mode, validate_target

        validate_target(self.tpu_target, "tpu_target")
        validate_mode(self.tpu_check, "tpu_check")


def launch_config(params: InterpretParams, *, num_devices: int, device_processes=None) -> LaunchConfig:
    """The configuration of one launch of ``params`` on ``num_devices``
    devices (``device_processes``: the process of each, for a launch
    spanning processes); checked when made."""
    return LaunchConfig(
        num_devices=num_devices,
        num_cores=params.num_cores_per_device,
        dma_execution_mode=params.dma_execution_mode,
        out_of_bounds_reads=params.out_of_bounds_reads,
        uninitialized_memory=params.uninitialized_memory,
        detect_races=params.detect_races,
        on_race=params.on_race,
        wait_timeout=params.wait_timeout,
        detect_deadlocks=params.detect_deadlocks,
        detect_uninitialized=params.detect_uninitialized,
        trace_path=params.trace_path,
        python_warnings=params.python_warnings,
        device_processes=device_processes,
    )
