"""Reading facts off a lowered program's text (`jax.jit(f).lower(x).as_text()`)."""

from __future__ import annotations

import re

# `launch_begin`'s allocation flags (rust/ffi/src/ops/prologue.rs).
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
