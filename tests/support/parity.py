"""Helpers comparing two interpreters' results bit for bit.

`run_case` runs one corpus case and returns its outputs as numpy arrays, or
the exception it raised. `assert_bitwise_equal` compares two output pytrees by
dtype, shape and raw bytes (so NaNs compare by bit pattern). `assert_same_error`
compares a stock error with ours.
"""

from __future__ import annotations

import re

import jax
import numpy as np
from jax.experimental.pallas import tpu as pltpu


def _is_stock(params) -> bool:
    return type(params) is pltpu.InterpretParams


def run_case(case, params):
    """Runs `case` under `params`; returns outputs (numpy pytree) or the exception.

    Stock interpret mode keeps global state that an exception leaves broken,
    so after a stock failure its state is reset here. Ours must not need that,
    so no reset is done for any other params class.
    """
    try:
        out = case.fn(params, *case.args)
        out = jax.block_until_ready(out)
        return jax.tree.map(np.asarray, out)
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        if _is_stock(params):
            pltpu.reset_tpu_interpret_mode_state()
        return exc


def _leaves(tree):
    return jax.tree.leaves(tree, is_leaf=lambda x: x is None)


def assert_bitwise_equal(a, b, where: str = "output"):
    """Asserts two pytrees of arrays are identical: structure, dtype, shape, bytes.

    Comparing raw bytes makes NaN == NaN when the bit patterns agree and
    distinguishes -0.0 from 0.0, which is what "same result" means here.
    """
    sa, sb = jax.tree.structure(a), jax.tree.structure(b)
    assert sa == sb, f"{where}: pytree structure differs: {sa} vs {sb}"
    for i, (x, y) in enumerate(zip(jax.tree.leaves(a), jax.tree.leaves(b))):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype, f"{where}[{i}]: dtype {x.dtype} vs {y.dtype}"
        assert x.shape == y.shape, f"{where}[{i}]: shape {x.shape} vs {y.shape}"
        if x.tobytes() != y.tobytes():
            xb = x.reshape(-1).view(np.uint8).reshape(x.size, -1) if x.size else x
            yb = y.reshape(-1).view(np.uint8).reshape(y.size, -1) if y.size else y
            bad = np.nonzero(np.any(xb != yb, axis=-1))[0]
            first = np.unravel_index(bad[0], x.shape)
            raise AssertionError(
                f"{where}[{i}]: {bad.size} of {x.size} elements differ bitwise;"
                f" first at {tuple(int(k) for k in first)}:"
                f" {x[first]!r} vs {y[first]!r}"
            )


# "ValueError: msg" as embedded by XLA in a JaxRuntimeError (the callback's
# traceback is quoted in the message; the last such line is the root cause).
_EMBEDDED_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$", re.M)


def split_stock_error(exc: BaseException) -> tuple[str, str]:
    """Returns (exception type name, message) of the root cause of a stock error.

    Stock interpret mode raises kernel errors inside an `io_callback`, so they
    surface as `jax.errors.JaxRuntimeError` whose text quotes the original
    `ValueError: ...` line. Errors found at trace time are raised directly.
    """
    text = str(exc)
    if isinstance(exc, jax.errors.JaxRuntimeError):
        found = _EMBEDDED_ERROR.findall(text)
        if found:
            name, msg = found[-1]
            return name.rsplit(".", 1)[-1], msg.strip()
    return type(exc).__name__, text.strip()


def assert_same_error(stock_exc: BaseException, our_exc: BaseException):
    """Asserts our error matches stock's.

    The rule: let `Name: text` be the root cause quoted in stock's error (or
    stock's exception itself when raised directly). Then
      * `text` must appear in our message (str of our exception), and
      * `Name` must be our exception's type name (or one of its base classes'
        names, so a more specific subclass of ValueError is fine), or appear
        in our message (when ours is a JaxRuntimeError quoting the cause too).
    """
    name, text = split_stock_error(stock_exc)
    ours = str(our_exc)
    assert text in ours, (
        f"stock error text not found in ours.\n  stock: {name}: {text}\n  ours: {type(our_exc).__name__}: {ours}"
    )
    our_names = {cls.__name__ for cls in type(our_exc).__mro__}
    assert name in our_names or f"{name}:" in ours, f"stock raised {name}, ours raised {type(our_exc).__name__}: {ours}"
