"""Calling the installed pltpu / pl functions from our wrappers.

Each public function of mosaic_rt.tpu takes the signature of the stock
function it mirrors (`inspect.signature`), checks the bound arguments, then
calls the stock function with the caller's arguments unchanged: whatever the
installed jax binds, we bind, so lowering parity holds by construction and a
new release's parameters need no change here.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from typing import Any, Callable

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Stock's own deprecation of `device_id_type` (jax 0.12: the default became
# None) warns with a stacklevel that lands on the frame calling stock, which
# is ours; see StockCall.run.
_DEPRECATED_WHEN_DEFAULT_NONE = ("device_id_type",)


class StockCall:
    """One call of a stock function: its arguments bound by stock's
    signature (defaults applied), and a way to make the call."""

    def __init__(self, fn: Callable, signature: inspect.Signature, args: tuple, kwargs: dict):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn.__name__}(): {e}") from None
        self.explicit = dict(bound.arguments)
        bound.apply_defaults()
        self.arguments = bound.arguments
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._signature = signature

    def __getitem__(self, name: str) -> Any:
        """The bound value of `name`; None if this release has no such
        parameter."""
        return self.arguments.get(name)

    def run(self) -> Any:
        if not self._passes_deprecated_argument():
            return self._fn(*self._args, **self._kwargs)
        # Rare path (an explicitly passed deprecated argument): record stock's
        # warnings and re-issue them at the user's line, as a direct call of
        # stock would. catch_warnings swaps process-wide state, which is why
        # no other call goes through here.
        user = _user_frame()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = self._fn(*self._args, **self._kwargs)
        for w in caught:
            _reissue(w, user)
        return result

    def _passes_deprecated_argument(self) -> bool:
        for name in _DEPRECATED_WHEN_DEFAULT_NONE:
            param = self._signature.parameters.get(name)
            if param is not None and param.default is None and self.explicit.get(name) is not None:
                return True
        return False


def mirror(stock_fn: Callable) -> Callable:
    """Makes `impl(call: StockCall)` a function with `stock_fn`'s signature."""
    signature = inspect.signature(stock_fn)

    def decorate(impl):
        def wrapper(*args, **kwargs):
            return impl(StockCall(stock_fn, signature, args, kwargs))

        wrapper.__name__ = impl.__name__
        wrapper.__qualname__ = impl.__qualname__
        wrapper.__doc__ = impl.__doc__
        wrapper.__module__ = impl.__module__
        wrapper.__signature__ = signature
        return wrapper

    return decorate


def is_ours(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _user_frame():
    frame = sys._getframe(1)
    while frame is not None and is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _reissue(w: warnings.WarningMessage, user) -> None:
    if user is None or not is_ours(w.filename):
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return
    module_globals = user.f_globals
    warnings.warn_explicit(
        w.message,
        w.category,
        user.f_code.co_filename,
        user.f_lineno,
        module=module_globals.get("__name__"),
        registry=module_globals.setdefault("__warningregistry__", {}),
        module_globals=module_globals,
    )
