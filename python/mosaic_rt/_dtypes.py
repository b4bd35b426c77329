"""The element types simulated memory holds (the Rust ``DType`` table).

Every dtype jax can give a Pallas TPU kernel on CPU: numpy's bool, ints,
floats and complex types, and ml_dtypes' bfloat16, int4, uint4, int2, uint2,
float4_e2m1fn and every float8 type. Not supported, because jax itself cannot
run them on CPU: int1/uint1 (XLA rejects the arguments) and float6_e2m3fn /
float6_e3m2fn (no XLA FFI dtype; stock interpret mode fails or aborts).

Simulated memory, like numpy, stores one element per ``itemsize`` bytes: the
sub-byte types take one byte each, value in the low bits. XLA packs them in
the buffers it hands our FFI handlers; the handlers convert.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from mosaic_rt import _native

#: Names in code order: the one dtype table (``mosaic_rt_wire::DType``, read
#: from ``_native.DTYPES``), whose codes the programs' types share.
NAMES: tuple[str, ...] = tuple(sorted(_native.DTYPES, key=_native.DTYPES.__getitem__))


def _numpy(name: str) -> np.dtype:
    kind = getattr(ml_dtypes, name, None)
    return np.dtype(kind if kind is not None else name)


#: numpy dtype of every supported name.
DTYPES: dict[str, np.dtype] = {name: _numpy(name) for name in NAMES}

#: Bits per element of the sub-byte types (XLA packs these).
SUB_BYTE_BITS: dict[str, int] = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def numpy_dtype(name: str) -> np.dtype:
    """numpy dtype of a native dtype name."""
    return DTYPES[name]


def dtype_name(dtype: Any, what: str = "dtype") -> str:
    """The native name of ``dtype`` (anything ``np.dtype`` accepts).

    Raises ``TypeError`` when ``dtype`` is not a dtype at all and
    ``ValueError`` naming it when simulated memory cannot hold it.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what} must be a numpy/jax dtype, got {dtype!r}") from None
    if DTYPES.get(dt.name) != dt:
        raise ValueError(f"unsupported {what} {dt.name}: expected one of {', '.join(NAMES)}")
    return dt.name


def byte_view(arr: np.ndarray) -> np.ndarray:
    """A view of C-contiguous ``arr`` that numpy can export through the
    buffer protocol (uint8 for ml_dtypes' types, which it cannot export)."""
    if arr.dtype.kind == "V" or arr.dtype == DTYPES["bfloat16"]:
        return arr.reshape(-1).view(np.uint8)
    return arr


def canonical_bytes(arr: np.ndarray) -> np.ndarray:
    """``byte_view`` of C-contiguous ``arr``, with the unused high bits of
    sub-byte elements cleared (a copy only when some are set), so memory only
    holds the values numpy would produce for them."""
    raw = byte_view(arr)
    bits = SUB_BYTE_BITS.get(arr.dtype.name)
    if bits is not None and DTYPES[arr.dtype.name] == arr.dtype:
        mask = np.uint8((1 << bits) - 1)
        if np.any(raw & ~mask):
            raw = raw & mask
    return raw
