"""A kernel's fingerprint for the TPU compile check: the same in every
process for the same kernel, different when anything that decides the
compiler's answer differs.

``repr(grid_mapping)`` is not enough: jax's GridMapping repr shows only the
grid and block shapes, not the index maps, array shapes, scratch, memory
spaces or pipeline modes. So every dataclass is walked field by field (all
fields, also those left out of its repr), jaxprs are pretty-printed (no
source locations in that text), arrays are hashed by content, functions
named by module and qualified name, and object addresses stripped. Sets are
sorted so string-hash randomization cannot reorder them.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_DEPTH = 24


def canonical(obj, depth: int = 0) -> str:
    """Text that stands for ``obj`` (see the module doc)."""
    if depth > _MAX_DEPTH:
        return _plain(obj)
    d = depth + 1
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return repr(obj)
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__qualname__}.{obj.name}"
    if isinstance(obj, (tuple, list)):
        return type(obj).__name__ + "(" + ", ".join(canonical(x, d) for x in obj) + ")"
    if isinstance(obj, dict):
        items = sorted((canonical(k, d), canonical(v, d)) for k, v in obj.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(obj, (set, frozenset)):
        return "set(" + ", ".join(sorted(canonical(x, d) for x in obj)) + ")"
    kind = type(obj).__name__
    if kind in ("Jaxpr", "ClosedJaxpr"):
        consts = getattr(obj, "consts", None)
        text = _plain(obj)
        return text + ("" if not consts else " consts " + canonical(list(consts), d))
    if (
        hasattr(obj, "shape")
        and hasattr(obj, "dtype")
        and hasattr(obj, "__array__")
        and not kind.startswith(("Shaped", "Abstract"))
    ):
        return _array(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = ", ".join(f"{f.name}={canonical(getattr(obj, f.name, None), d)}" for f in dataclasses.fields(obj))
        return f"{type(obj).__qualname__}({fields})"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"<fn {getattr(obj, '__module__', '?')}.{obj.__qualname__}>"
    return _plain(obj)


def _plain(obj) -> str:
    return _ADDRESS.sub("", str(obj) if type(obj).__name__ in ("Jaxpr", "ClosedJaxpr") else repr(obj))


def _array(obj) -> str:
    import numpy as np

    try:
        a = np.asarray(obj)
    except Exception:  # noqa: BLE001 - a tracer or a device we cannot read: its type is all we know
        return f"array({getattr(obj, 'dtype', '?')}{tuple(getattr(obj, 'shape', ()))})"
    if a.dtype == object:
        return f"array({a.shape}, {canonical(a.tolist())})"
    digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
    return f"array({a.dtype}{a.shape}:{digest})"


def of_kernel(avals, kernel_params: dict, axis_sizes: dict, where: tuple, x64: bool) -> str:
    """The fingerprint of one pallas_call as lowered: its params (all of
    them but ``interpret``), operand types, mesh axes in scope, the name and
    source line the compiler's messages quote, and the x64 mode."""
    parts = [
        canonical(where),
        canonical(sorted(kernel_params.items())),
        canonical([(tuple(a.shape), str(a.dtype)) for a in avals]),
        canonical(list(axis_sizes.items())),
        f"x64={bool(x64)}",
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
