"""The categories of generated kernels, each separately switchable:
name -> ``generate(rng) -> spec``."""

from __future__ import annotations

from fuzzing import elementwise

GENERATORS = {
    "elementwise": elementwise.generate,
}

NAMES = tuple(GENERATORS)
