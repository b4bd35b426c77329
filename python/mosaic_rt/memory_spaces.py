"""Memory spaces -> the core's codes: the one conversion every layer uses.

A memory space arrives as a pallas/pltpu enum member (from a kernel's refs
and allocations), as its name (``"vmem"``, from the typed wrappers' callers
and tests) or already as a code. The codes are the core's own
(``mosaic_rt._native.MEMORY_SPACES``, read from Rust, never restated here).
Stock simulates ``ANY`` as HBM and ``DEFAULT`` as VMEM; so does this module.

Uses: ``mosaic_rt._native`` and ``mosaic_rt.jax_internals`` only.
"""

from __future__ import annotations

import numbers

from mosaic_rt import _native
from mosaic_rt import jax_internals as jx

CODES: dict[str, int] = _native.MEMORY_SPACES
SMEM = CODES["smem"]


def forward_any_to_hbm(memory_space):
    """``memory_space`` with pallas' ``ANY`` replaced by HBM (as stock does)."""
    return jx.MemorySpace.HBM if memory_space is jx.AnyMemorySpace else memory_space


def code(space) -> int:
    """The core's code of ``space``: an enum member, a name or a code.

    An unknown name is a ``ValueError`` listing the known ones; a memory
    space stock does not simulate is a ``NotImplementedError``."""
    if isinstance(space, str):
        try:
            return CODES[space]
        except KeyError:
            raise ValueError(f"unknown memory space {space!r}; expected one of {sorted(CODES)}") from None
    if isinstance(space, numbers.Integral):  # numpy integers too, as before
        return int(space)
    return CODES[jx.memory_space_name(forward_any_to_hbm(space))]
