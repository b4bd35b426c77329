"""The categories of generated kernels, each separately switchable:
name -> ``generate(rng) -> spec``."""

from __future__ import annotations

from fuzzing import dma, elementwise, grid, memory, multi_device, pipeline, scalar, transforms

GENERATORS = {
    "elementwise": elementwise.generate,
    "memory": memory.generate,
    "scalar": scalar.generate,
    "grid": grid.generate,
    "dma": dma.generate,
    "multi_device": multi_device.generate,
    "transforms": transforms.generate,
    "pipeline": pipeline.generate,
}

NAMES = tuple(GENERATORS)
