"""Several TPU cores per device, running truly concurrently.

XLA runs one device's program on one thread, but the cores of a TPU device
run at the same time and may wait on each other. So each core's grid loop
is traced into its own XLA computation, and one host callback per kernel
launch (not per op) runs those computations on one thread per core. Every
memory/DMA/semaphore op inside them is still a native FFI call; the cores
meet in the same native runtime through the launch handle they are passed.
"""

from __future__ import annotations

import functools
from concurrent import futures

import jax
import jax.numpy as jnp
import numpy as np

from mosaic_rt.jax_internals import Jaxpr, eval_jaxpr, io_callback

_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)


@functools.lru_cache(maxsize=64)
def _compiled_core_program(jaxpr: Jaxpr, const_types):
    """The compiled program of one kernel's core: (core, *consts) -> token.

    Compiled ahead of the threads: a first call through `jit` runs the
    program inside its cache-miss path, which serialises concurrent callers
    (and two cores waiting on each other would never meet).
    """

    def program(core, *consts):
        return eval_jaxpr(jaxpr, consts, core)

    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in const_types]
    return jax.jit(program).lower(jax.ShapeDtypeStruct((), np.int32), *args).compile()


def _run_all(jaxpr, num_cores, token, *consts):
    consts = [np.asarray(c) for c in consts]
    compiled = _compiled_core_program(
        jaxpr, tuple((c.shape, c.dtype) for c in consts))
    with futures.ThreadPoolExecutor(max_workers=num_cores,
                                    thread_name_prefix="mosaic_rt-core") as pool:
        runs = [pool.submit(lambda i=i: jax.block_until_ready(compiled(np.int32(i), *consts)))
                for i in range(num_cores)]
        errors = []
        for run in runs:
            try:
                run.result()
            except Exception as e:  # noqa: BLE001 - re-raised below
                errors.append(e)
    if errors:
        # Every failed core reports the launch's root cause (the native layer
        # sees to that), so the first error is as good as any.
        raise errors[0]
    return token


def run_cores_concurrently(run_core, num_cores: int, token):
    """Emits a launch of `run_core(core, token)` on `num_cores` threads."""
    closed = jax.make_jaxpr(lambda core: run_core(core, jnp.zeros((), jnp.int32)))(
        jnp.int32(0))
    return io_callback(
        functools.partial(_run_all, closed.jaxpr, num_cores), _TOKEN, token, *closed.consts)
