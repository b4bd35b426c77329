"""`mosaic_rt.InterpretParams`: stock TPU interpret parameters plus our own.

It subclasses jax's `pltpu.InterpretParams`, so every stock field keeps its
name, default, meaning and validation, and everything in jax that checks
`isinstance(interpret, pltpu.InterpretParams)` (effects, `core_map`,
`force_tpu_interpret_mode`) treats it as TPU interpret mode. The seam
(`mosaic_rt.interpret.seam`) routes only instances of this class to our
interpreter; stock instances keep the stock path.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import StockInterpretParams as _StockParams


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterpretParams(_StockParams):
    """Parameters for running Pallas TPU kernels on mosaic_rt's native runtime.

    Accepts every field of the installed jax's ``pltpu.InterpretParams``
    (see its docstring) plus:

    Attributes:
      on_race: with ``detect_races=True``, what a data race does: ``"raise"``
        (the kernel fails with ``mosaic_rt.RaceError`` at the first race)
        or ``"warn"`` (a ``mosaic_rt.RaceWarning`` per distinct race). jax
        0.11+ has this field with default ``"raise"``; on jax 0.10.2, whose
        stock interpreter only prints races, the default is ``"warn"``.
      wait_timeout: seconds after which a blocked semaphore/DMA wait or
        barrier fails with ``mosaic_rt.WaitTimeout`` instead of hanging
        (``None``: no timeout).
      on_semaphore_leak: what to do when a semaphore has a non-zero count at
        kernel exit: ``"warn"`` (a ``RuntimeWarning``), ``"raise"``
        (``mosaic_rt.SemaphoreLeakError``) or ``"ignore"``.
    """

    if not STOCK_HAS_ON_RACE:
        on_race: Literal["raise", "warn"] = "warn"
    wait_timeout: float | None = 120.0
    on_semaphore_leak: Literal["warn", "raise", "ignore"] = "warn"

    def __post_init__(self):
        super().__post_init__()
        if self.dma_execution_mode not in ("eager", "on_wait"):
            raise ValueError(
                "dma_execution_mode must be 'eager' or 'on_wait', got"
                f" {self.dma_execution_mode!r}."
            )
        if self.out_of_bounds_reads not in ("raise", "uninitialized"):
            raise ValueError(
                "out_of_bounds_reads must be 'raise' or 'uninitialized', got"
                f" {self.out_of_bounds_reads!r}."
            )
        if self.uninitialized_memory not in ("nan", "zero"):
            raise ValueError(
                "uninitialized_memory must be 'nan' or 'zero', got"
                f" {self.uninitialized_memory!r}."
            )
        if self.buffer_bounds not in ("logical", "padded"):
            raise ValueError(
                "buffer_bounds must be 'logical' or 'padded', got"
                f" {self.buffer_bounds!r}."
            )
        if self.wait_timeout is not None:
            # Any positive number; inf (or too long to count) means no timeout.
            try:
                ok = (not isinstance(self.wait_timeout, (bool, str, bytes))
                      and float(self.wait_timeout) > 0)
            except OverflowError:  # an int beyond float range: positive or not
                ok = self.wait_timeout > 0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(
                    "wait_timeout must be a positive number of seconds or None (inf: no"
                    f" timeout), got {self.wait_timeout!r}."
                )
        if self.on_race not in ("raise", "warn"):
            raise ValueError(
                f"on_race must be 'raise' or 'warn', got {self.on_race!r}.")
        if self.on_semaphore_leak not in ("warn", "raise", "ignore"):
            raise ValueError(
                "on_semaphore_leak must be 'warn', 'raise' or 'ignore', got"
                f" {self.on_semaphore_leak!r}."
            )
