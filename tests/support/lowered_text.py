"""Reading facts off a lowered program's text (`jax.jit(f).lower(x).as_text()`)."""

from __future__ import annotations

import collections
import re

import numpy as np
from mosaic_rt import _native

# `launch_begin`'s allocation flags (rust/ffi/src/ops/launch_begin.rs).
BORROW, DIRECT = 2, 4


def prologue_items_with(text: str, bit: int) -> int:
    """How many allocations of the launch prologues (`launch_begin`) in the
    lowered ``text`` have flag ``bit`` (`BORROW`, `DIRECT`)."""
    count = 0
    for values, n in re.findall(r"item_flags = dense<\[?([-\d, ]*)\]?> : tensor<(\d+)xi64>", text):
        flags = [int(v) for v in values.split(",") if v.strip()]
        flags = flags * int(n) if len(flags) == 1 else flags  # a splat
        count += sum(1 for f in flags if f & bit)
    return count


def native_ops(text: str) -> collections.Counter:
    """Native ops of the lowered ``text`` by target (without the prefix),
    whether a call of their own or a member of a `batch` call (whose
    attribute ``ops`` lists its members' codes, `_native.BATCH_OPS`)."""
    counts = collections.Counter()
    for line in text.splitlines():
        for name in re.findall(r"custom_call @mosaic_rt_(\w+)", line):
            if name != "batch":
                counts[name] += 1
                continue
            counts.update(_native.BATCH_OPS[c].removeprefix("mosaic_rt_") for c in batch_ops(line))
    return counts


def batch_ops(line: str) -> list:
    """The member op codes of the `batch` call on ``line``."""
    return batch_attr(line, "ops")


def batch_attr(line: str, name: str) -> list:
    """The int64 array attribute ``name`` of the call on ``line``, printed
    as a list, a splat, or (a long one) hex bytes."""
    m = re.search(rf'\b{name} = dense<(?:"0x([0-9A-Fa-f]+)"|\[?([-\d, ]*)\]?)> : tensor<(\d+)xi64>', line)
    hex_bytes, values, n = m.groups()
    if hex_bytes is not None:
        return [int(v) for v in np.frombuffer(bytes.fromhex(hex_bytes), "<i8")]
    codes = [int(v) for v in values.split(",")]
    return codes * int(n) if len(codes) == 1 else codes  # a splat


def batch_calls(text: str) -> int:
    """How many `batch` calls the lowered ``text`` has."""
    return len(re.findall(r"custom_call @mosaic_rt_batch\b", text))
