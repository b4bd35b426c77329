"""A TensorCore mesh for `pl.kernel` on every supported jax.

`pltpu.TensorCoreMesh(axis_name=..., num_cores=...)` is public from jax 0.11
on; 0.12 deprecates `pltpu.create_tensorcore_mesh` (an AttributeError from
0.12.1), the only spelling 0.10.2 has."""

from jax.experimental.pallas import tpu as pltpu


def core_mesh(cores: int, axis: str = "core"):
    if hasattr(pltpu, "TensorCoreMesh"):
        return pltpu.TensorCoreMesh(axis_name=axis, num_cores=cores)
    return pltpu.create_tensorcore_mesh(axis, num_cores=cores)
