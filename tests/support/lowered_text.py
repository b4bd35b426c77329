"""Reading facts off a lowered program's text (`jax.jit(f).lower(x).as_text()`)."""

from __future__ import annotations

import collections
import re

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
            values, n = re.search(r"\bops = dense<\[?([-\d, ]*)\]?> : tensor<(\d+)xi64>", line).groups()
            codes = [int(v) for v in values.split(",")]
            codes = codes * int(n) if len(codes) == 1 else codes  # a splat
            counts.update(_native.BATCH_OPS[c].removeprefix("mosaic_rt_") for c in codes)
    return counts


def batch_calls(text: str) -> int:
    """How many `batch` calls the lowered ``text`` has."""
    return len(re.findall(r"custom_call @mosaic_rt_batch\b", text))
