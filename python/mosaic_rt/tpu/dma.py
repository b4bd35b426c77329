"""Asynchronous (local and remote) copies, mirroring pltpu's on the
installed jax release.

Our descriptor subclasses pltpu's, and our functions call pltpu's: every
primitive is bound by stock code, so TPU lowering and both interpreters see
the same program on every release (e.g. 0.12's `src_sem` for local copies
and `wait_read` / `wait_write` come with it). We add checks that run before
anything is bound, and report a descriptor that was never used as a
warning naming its creation site, in place of stock's log line.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any

from jax.experimental.pallas import tpu as pltpu

from mosaic_rt import jax_internals
from mosaic_rt.device_id_forms import check_device_id, effective_type
from mosaic_rt.tpu._stock import StockCall, mirror

_Stock = jax_internals.StockAsyncCopyDescriptor


class UnusedAsyncCopyWarning(UserWarning):
    """An AsyncCopyDescriptor was collected without being started or waited."""


def _check_start(priority: Any, add: Any) -> None:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"DMA priority must be a Python int, got {type(priority).__name__} {priority!r}.")
    if priority < 0:
        raise ValueError(f"DMA priority must be non-negative, got {priority}.")
    if not isinstance(add, bool):
        raise TypeError(f"`add` must be a bool, got {add!r}.")


def _creation_site() -> tuple[str, int] | None:
    # The dataclass-generated __init__ lives in "<string>": not the user's.
    for frame in jax_internals.user_source_frames():
        generated = frame.file_name == "<string>" and frame.function_name.endswith("__init__")
        if not generated:
            return frame.file_name, frame.start_line
    return None


_START_SIGNATURE = inspect.signature(_Stock.start)


@dataclasses.dataclass
class AsyncCopyDescriptor(_Stock):
    """pltpu's DMA descriptor (same fields, same methods, same binding) with
    the device id checked up front and a warning if it is never used."""

    _site: tuple[str, int] | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        super().__post_init__()  # stock's invariant, with stock's message
        check_device_id(self.device_id, self.device_id_type)
        # Only a fully valid descriptor can be "forgotten"; set last.
        self._site = _creation_site() or ("<unknown>", 0)

    @classmethod
    def _replacing(cls, stock: _Stock) -> AsyncCopyDescriptor:
        """Ours in place of a descriptor a stock function returned."""
        used = jax_internals.descriptor_used(stock)
        jax_internals.mark_descriptor_used(stock)  # it is dropped here
        fields = {f.name: getattr(stock, f.name) for f in dataclasses.fields(stock) if f.init}
        ours = cls(**fields)
        if used:
            jax_internals.mark_descriptor_used(ours)
        return ours

    def start(self, *args, **kwargs) -> None:
        call = StockCall(_Stock.start, _START_SIGNATURE, (self, *args), kwargs)
        jax_internals.mark_descriptor_used(self)  # a failed start says so itself
        _check_start(call["priority"], call["add"])
        super().start(*args, **kwargs)

    start.__signature__ = _START_SIGNATURE

    def __del__(self):
        # Replaces stock's __del__ (its "was not used" log line) entirely.
        if self._site is None or jax_internals.descriptor_used(self):
            return
        file_name, line = self._site
        try:
            warnings.warn_explicit(
                f"AsyncCopyDescriptor created at {file_name}:{line} was never"
                " started or waited; call `.start()` (and later `.wait()`) on it,"
                " or use async_copy / async_remote_copy.",
                UnusedAsyncCopyWarning,
                file_name,
                line,
            )
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to report to
            pass


def _remote_checks(call: StockCall) -> None:
    check_device_id(call["device_id"], effective_type(call["device_id_type"]))


@mirror(pltpu.make_async_copy)
def make_async_copy(call):
    """Describes a copy within this device; nothing happens until `.start()`."""
    return AsyncCopyDescriptor._replacing(call.run())


@mirror(pltpu.async_copy)
def async_copy(call):
    """Starts a local copy and returns its descriptor (to `.wait()` on)."""
    _check_start(call["priority"], call["add"])
    return AsyncCopyDescriptor._replacing(call.run())


@mirror(pltpu.make_async_remote_copy)
def make_async_remote_copy(call):
    """Describes a copy from this device's `src_ref` to `dst_ref` on
    `device_id`, counted on `send_sem` here and `recv_sem` there. MESH ids
    are tuples of coordinates or {axis: index} dicts; LOGICAL ids are scalar
    device indices."""
    _remote_checks(call)
    return AsyncCopyDescriptor._replacing(call.run())


@mirror(pltpu.async_remote_copy)
def async_remote_copy(call):
    """Starts a remote copy and returns its descriptor."""
    _remote_checks(call)
    return AsyncCopyDescriptor._replacing(call.run())
