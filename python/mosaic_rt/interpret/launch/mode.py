"""Turning mosaic_rt interpret mode on for many kernels at once."""

from __future__ import annotations

import contextlib

from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.jax_internals import interpret_mode_setting


def _check(params) -> InterpretParams:
    if not isinstance(params, InterpretParams):
        raise TypeError(
            "expected mosaic_rt.InterpretParams, got"
            f" {type(params).__module__}.{type(params).__qualname__}; use"
            " jax's pltpu.force_tpu_interpret_mode for stock interpret mode."
        )
    return params


@contextlib.contextmanager
def force_interpret_mode(params: InterpretParams | None = None):
    """Runs every `pallas_call` / `core_map` traced inside on mosaic_rt.

    Errors raised natively by a kernel inside the block reach the caller as
    their own Python type (``ValueError``, ``IndexError``, ...): see
    `mosaic_rt.native_errors`.
    """
    from mosaic_rt.ffi import native_errors

    params = _check(InterpretParams() if params is None else params)
    prev = interpret_mode_setting.swap_local(params)
    try:
        with native_errors():
            yield
    finally:
        interpret_mode_setting.set_local(prev)


_DEFAULT = object()


def set_interpret_mode(params=_DEFAULT) -> None:
    """Process-wide: every later `pallas_call` / `core_map` runs on mosaic_rt.

    With no argument, uses ``InterpretParams()``; pass ``None`` to turn it off.
    """
    if params is _DEFAULT:
        params = InterpretParams()
    elif params is not None:
        _check(params)
    interpret_mode_setting.set_global(params)
