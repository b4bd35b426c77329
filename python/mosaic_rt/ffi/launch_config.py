"""How one launch runs: every option `kernel_begin` / `launch_begin` carry to
the native runtime (its `Config`, rust/core/src/config.rs), each defined
once -- its default, its check, its attribute.

`mosaic_rt.InterpretParams` takes its defaults from here and builds one
`LaunchConfig` per launch (`interpret.params.launch_config`); building one
checks it (`InterpretParams` builds one when it is made, so a bad value
fails at once). The spellings of the string options are the native wire
enums' (`_native.SETTINGS`). Stock's fields keep stock's defaults, read
from the installed jax.

May use: `mosaic_rt._native`, `mosaic_rt.jax_internals`, `mosaic_rt.ffi.reports`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from mosaic_rt import _native
from mosaic_rt.ffi import reports
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import StockInterpretParams as _StockParams

_STOCK = _StockParams()


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchConfig:
    """One launch's options (see `mosaic_rt.InterpretParams` for their
    meaning), checked when made. ``num_devices`` / ``num_cores``: the
    launch's devices and cores per device; ``deadlock_idle_ms`` (None: the
    runtime's default, <= 0: off): how long the whole process must be idle
    before devices that never joined count as stuck; ``device_ordinals``:
    the XLA device of each logical device, checked natively when given;
    ``device_processes``: the process of each device of a launch spanning
    processes."""

    num_devices: int = 1
    num_cores: int = 1
    # "tpu", not stock's "on_wait": a TPU's DMA engine starts a copy when it
    # is issued, so a copy issued earlier is done with its buffers before a
    # later one touches them ("on_wait" -- every copy deferred to its wait,
    # the most adversarial schedule -- breaks tpu-inference's GDN kernels,
    # which prefetch into a buffer an earlier store copy is still sending);
    # and a copy to another core crosses the interconnect while that core
    # runs on, so it does not land between the destination's own stores
    # ("eager" lets a neighbour's copy land before the destination zeroes
    # its output, which then wipes it: jax's remote-DMA ppermute tests).
    dma_execution_mode: str = "tpu"
    # "tpu", not stock's "raise": a TPU's loads are unchecked, and kernels
    # prefetch past the end and discard the value (tpu-inference's MLA v2).
    out_of_bounds_reads: str = "tpu"
    uninitialized_memory: str = _STOCK.uninitialized_memory
    detect_races: bool = _STOCK.detect_races
    # Older jax's stock interpreter only prints races: warn, not raise.
    on_race: str = _STOCK.on_race if STOCK_HAS_ON_RACE else "warn"
    wait_timeout: float | None = 120.0
    detect_deadlocks: bool = True
    deadlock_idle_ms: int | None = None
    detect_uninitialized: bool = False
    trace_path: str | os.PathLike | None = None
    python_warnings: bool | None = None
    device_ordinals: tuple[int, ...] | None = None
    device_processes: tuple[int, ...] | None = None

    def __post_init__(self):
        for name in ("dma_execution_mode", "out_of_bounds_reads", "uninitialized_memory"):
            _one_of(name, getattr(self, name), _native.SETTINGS[name])
        # "print" (stock's own behaviour) is for a runtime driven directly.
        _one_of("on_race", self.on_race, ("raise", "warn"))
        _check_timeout(self.wait_timeout)
        if self.python_warnings is not None and not isinstance(self.python_warnings, bool):
            raise TypeError(f"python_warnings must be a bool or None, got {self.python_warnings!r}.")
        for flag in ("detect_uninitialized", "detect_deadlocks"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}.")
        if self.trace_path is not None and not isinstance(self.trace_path, (str, os.PathLike)):
            raise TypeError(f"trace_path must be a path or None, got {self.trace_path!r}.")

    def attrs(self) -> dict:
        """`kernel_begin`'s (and `launch_begin`'s) attributes. An optional
        attribute is left out where its absence means the same (the
        handler's reading, rust/ffi/src/ops/kernel.rs)."""
        extra = {}
        if self.device_ordinals is not None:
            extra["device_ordinals"] = np.asarray([int(d) for d in self.device_ordinals], np.int64)
        if self.device_processes is not None:
            extra["device_processes"] = np.asarray([int(p) for p in self.device_processes], np.int64)
        if self.detect_races:
            extra["on_race"] = self.on_race  # else the runtime has no race policy to apply
        if not self.detect_deadlocks:
            extra["detect_deadlocks"] = 0
        if self.deadlock_idle_ms is not None:
            extra["deadlock_idle_ms"] = int(self.deadlock_idle_ms)
        if self.detect_uninitialized:
            extra["detect_uninitialized"] = 1
        if self.trace_path:
            extra["trace_path"] = os.path.abspath(os.path.expanduser(os.fspath(self.trace_path)))
        if not reports.as_warnings(self.python_warnings):
            extra["report_as_warnings"] = 0
        return dict(
            extra,
            num_devices=int(self.num_devices),
            num_cores=int(self.num_cores),
            dma_execution_mode=self.dma_execution_mode,
            out_of_bounds_reads=self.out_of_bounds_reads,
            uninitialized_memory=self.uninitialized_memory,
            wait_timeout_ms=_timeout_ms(self.wait_timeout),
            detect_races=int(bool(self.detect_races)),
        )


def _one_of(name: str, value, choices) -> None:
    if value not in choices:
        quoted = [f"'{c}'" for c in choices]
        spelled = f"{', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
        raise ValueError(f"{name} must be {spelled}, got {value!r}.")


def _check_timeout(timeout) -> None:
    """Any positive number or None; inf (or too long to count) means no
    timeout."""
    if timeout is None:
        return
    try:
        ok = not isinstance(timeout, (bool, str, bytes)) and float(timeout) > 0
    except OverflowError:  # an int beyond float range: positive or not
        ok = timeout > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"wait_timeout must be a positive number of seconds or None (inf: no timeout), got {timeout!r}."
        )


def _timeout_ms(timeout) -> int:
    """The wire's milliseconds: 0 for no timeout (None, inf, or more
    milliseconds than int64 holds)."""
    if timeout is None or not timeout * 1000 < 2**63:
        return 0
    return max(1, int(timeout * 1000))
