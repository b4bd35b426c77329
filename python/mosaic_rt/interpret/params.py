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
import os
from typing import Literal

from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import StockInterpretParams as _StockParams


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
        core it goes to) or ``"on_wait"`` (stock's default: deferred until
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

    # "tpu", not stock's "on_wait": a TPU's DMA engine starts a copy when it
    # is issued, so a copy issued earlier is done with its buffers before a
    # later one touches them ("on_wait" -- every copy deferred to its wait,
    # the most adversarial schedule -- breaks tpu-inference's GDN kernels,
    # which prefetch into a buffer an earlier store copy is still sending);
    # and a copy to another core crosses the interconnect while that core
    # runs on, so it does not land between the destination's own stores
    # ("eager" lets a neighbour's copy land before the destination zeroes
    # its output, which then wipes it: jax's remote-DMA ppermute tests).
    dma_execution_mode: Literal["tpu", "eager", "on_wait"] = "tpu"
    # "tpu", not stock's "raise": a TPU's loads are unchecked, and kernels
    # prefetch past the end and discard the value (tpu-inference's MLA v2).
    out_of_bounds_reads: Literal["raise", "uninitialized", "tpu"] = "tpu"
    if not STOCK_HAS_ON_RACE:
        on_race: Literal["raise", "warn"] = "warn"
    python_warnings: bool | None = None
    detect_uninitialized: bool = False
    detect_deadlocks: bool = True
    trace_path: str | None = None
    wait_timeout: float | None = 120.0
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
        if self.dma_execution_mode not in ("eager", "on_wait", "tpu"):
            raise ValueError(
                f"dma_execution_mode must be 'eager', 'on_wait' or 'tpu', got {self.dma_execution_mode!r}."
            )
        if self.out_of_bounds_reads not in ("raise", "uninitialized", "tpu"):
            raise ValueError(
                f"out_of_bounds_reads must be 'raise', 'uninitialized' or 'tpu', got {self.out_of_bounds_reads!r}."
            )
        if self.uninitialized_memory not in ("nan", "zero"):
            raise ValueError(f"uninitialized_memory must be 'nan' or 'zero', got {self.uninitialized_memory!r}.")
        if self.buffer_bounds not in ("logical", "padded"):
            raise ValueError(f"buffer_bounds must be 'logical' or 'padded', got {self.buffer_bounds!r}.")
        if self.wait_timeout is not None:
            # Any positive number; inf (or too long to count) means no timeout.
            try:
                ok = not isinstance(self.wait_timeout, (bool, str, bytes)) and float(self.wait_timeout) > 0
            except OverflowError:  # an int beyond float range: positive or not
                ok = self.wait_timeout > 0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    "wait_timeout must be a positive number of seconds or None (inf: no"
                    f" timeout), got {self.wait_timeout!r}."
                )
        if self.python_warnings is not None and not isinstance(self.python_warnings, bool):
            raise TypeError(f"python_warnings must be a bool or None, got {self.python_warnings!r}.")
        for flag in ("detect_uninitialized", "detect_deadlocks"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}.")
        if self.trace_path is not None and not isinstance(self.trace_path, (str, os.PathLike)):
            raise TypeError(f"trace_path must be a path or None, got {self.trace_path!r}.")
        if self.on_race not in ("raise", "warn"):
            raise ValueError(f"on_race must be 'raise' or 'warn', got {self.on_race!r}.")
        if self.on_semaphore_leak not in ("warn", "raise", "ignore"):
            raise ValueError(f"on_semaphore_leak must be 'warn', 'raise' or 'ignore', got {self.on_semaphore_leak!r}.")
        # tpu_target / tpu_check: see mosaic_rt.tpu_check (normalised there
        # when a kernel is lowered; checked here so a typo fails at once).
        from mosaic_rt.tpu_check.targets import validate_mode, validate_target

        validate_target(self.tpu_target, "tpu_target")
        validate_mode(self.tpu_check, "tpu_check")
