"""The categories of generated kernels, each separately switchable:
name -> ``generate(rng) -> spec``."""

from __future__ import annotations

from fuzzing import elementwise, memory, scalar

GENERATORS = {
    "elementwise": elementwise.generate,
    "memory": memory.generate,
    "scalar": scalar.generate,
}

NAMES = tuple(GENERATORS)
