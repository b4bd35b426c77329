"""The one place where mosaic_rt hooks into jax.

jax 0.10.2's pallas_call lowering (`jax/_src/pallas/pallas_call.py`,
`_pallas_call_lowering`) sends every `interpret` value that is an instance of
`pltpu.InterpretParams` to `interpret_pallas_call.interpret_pallas_call` of
`jax._src.pallas.mosaic.interpret`, looked up as a module attribute at
lowering time. `force_tpu_interpret_mode` and `pl.core_map` (which becomes a
pallas_call) go through the same lowering. So we install one dispatcher on
that attribute: it takes over for `mosaic_rt.InterpretParams` and calls the
original function for everything else, leaving stock behaviour untouched.
"""

from __future__ import annotations

import functools
import threading

from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _stock_module

_lock = threading.Lock()
_ATTR = "interpret_pallas_call"
_MARK = "_mosaic_rt_dispatcher"


def install() -> None:
    """Installs the dispatcher (idempotent, thread-safe)."""
    with _lock:
        current = getattr(_stock_module, _ATTR)
        if getattr(current, _MARK, False):
            return
        stock_impl = current

        @functools.wraps(stock_impl)
        def dispatch(*args, interpret_params, **kwargs):
            from mosaic_rt.interpret.params import InterpretParams
            if isinstance(interpret_params, InterpretParams):
                from mosaic_rt.interpret.kernel import interpret_pallas_call
                return interpret_pallas_call(
                    *args, interpret_params=interpret_params, **kwargs)
            return stock_impl(*args, interpret_params=interpret_params, **kwargs)

        setattr(dispatch, _MARK, True)
        dispatch.stock_impl = stock_impl  # type: ignore[attr-defined]
        setattr(_stock_module, _ATTR, dispatch)


def stock_interpret_pallas_call():
    """The original stock implementation (for tests and diagnostics)."""
    current = getattr(_stock_module, _ATTR)
    return getattr(current, "stock_impl", current)
