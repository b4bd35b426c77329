"""Typed values of generated straight-line code: what a statement makes, how
its type is found (by tracing it, so jnp's promotion rules are jax's own),
literals of a dtype, and source text of shapes and dtypes.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental.pallas import tpu as pltpu

FLOATS = ("float32", "bfloat16")
SIGNED = ("int32", "int16", "int8")
UNSIGNED = ("uint32", "uint16", "uint8")
INTS = SIGNED + UNSIGNED
# Dtypes a kernel operand may have (int4 is loaded and cast at once: the TPU
# computes in 4 bits only through packing).
OPERAND_DTYPES = FLOATS + INTS + ("bool", "int4")


@dataclasses.dataclass(frozen=True)
class Aval:
    shape: tuple
    dtype: str

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def struct(self):
        return jax.ShapeDtypeStruct(self.shape, jnp.dtype(self.dtype))


def kind(dtype: str) -> str:
    """ "f" float, "i" signed, "u" unsigned, "b" bool, "4" int4."""
    if dtype in FLOATS:
        return "f"
    if dtype == "bool":
        return "b"
    if dtype == "int4":
        return "4"
    return "u" if dtype in UNSIGNED else "i"


def bits(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(jnp.dtype(dtype)).itemsize * 8 if dtype != "int4" else 4


def dt(dtype: str) -> str:
    """Source text of a dtype."""
    return f"jnp.{dtype}" if dtype != "bool" else "jnp.bool_"


def shape_text(shape) -> str:
    return f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"


# Names a statement's expression may use (besides its operands).
NAMES = {"jnp": jnp, "lax": lax, "np": np, "pltpu": pltpu, "jax": jax}


def trace_aval(expr: str, args: list[Aval]) -> Aval | None:
    """The type of ``expr`` (``{0}``, ``{1}``, ... its operands) as jax
    traces it, or None when jax rejects it."""
    names = [f"_a{i}" for i in range(len(args))]
    code = f"lambda {', '.join(names)}: {expr.format(*names)}"
    try:
        fn = eval(code, dict(NAMES))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an implicit overflow or promotion warning: not this one
            out = jax.eval_shape(fn, *[a.struct() for a in args])
    except Exception:  # noqa: BLE001 - jax said no: the generator picks again
        return None
    if not isinstance(out, jax.ShapeDtypeStruct):
        return None
    return Aval(tuple(out.shape), np.dtype(out.dtype).name if out.dtype != jnp.bool_ else "bool")


def literal(rng, dtype: str, nonzero: bool = False) -> str:
    """Source text of a Python scalar that jax takes weakly as ``dtype``
    (``nonzero``: no float zero -- XLA folds ``x + 0.0`` to ``x``, which
    differs from the op for ``x = -0.0``)."""
    k = kind(dtype)
    if k == "b":
        return rng.choice(["True", "False"])
    if k == "f":
        pool = ["0.5", "2.0", "-1.5", "3.0", "1e30", "-7.25", "float('inf')", "float('nan')", "1e-40"]
        return rng.choice(pool + ([] if nonzero else ["0.0", "-0.0"]))
    info = ml_dtypes.iinfo(jnp.dtype(dtype))
    small = [0, 1, 2, 3, 7, -1, -2, -5]
    edge = [int(info.min), int(info.max), int(info.max) // 2 + 1]
    # A Python int beyond int32 overflows as a jitted function's argument
    # (jax converts weak ints through int32 first), whatever the dtype.
    pool = [v for v in small + edge if max(info.min, -(2**31)) <= v <= min(info.max, 2**31 - 1)]
    return str(rng.choice(pool))


def broadcastable(a: tuple, b: tuple) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False
