"""`pallas_call(..., debug=True)` under mosaic_rt prints what it prints on a
TPU: the kernel's jaxpr and the Mosaic module the Pallas TPU lowering makes
of it (stock interpret mode prints nothing).

The Pallas TPU lowering is jax's own Python and needs no TPU and no libtpu:
the same pallas_call, with ``interpret=False``, is lowered for the TPU
platform in a throwaway trace, and jax's rule prints as it does on a TPU
host (under `shard_map`, over an abstract mesh of the same axes). A kernel
that lowering rejects gets a one-line note instead: the interpreter still
runs it, and the TPU compile check (``tpu_target``) is where a rejection
fails the kernel.
"""

from __future__ import annotations

import sys


def print_tpu_lowering(args, kernel_params: dict) -> None:
    """Prints the jaxpr and Mosaic module of the pallas_call whose operands
    (tracers, as the lowering got them) are ``args`` and whose parameters
    other than ``interpret`` are ``kernel_params``."""
    import jax

    from mosaic_rt import jax_internals as jx

    specs = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in map(jx.get_aval, args)]

    def kernel(*operands):
        return jx.pallas_call_p.bind(*operands, interpret=False, **kernel_params)

    axes = dict(jx.axis_sizes())
    try:
        if axes:
            # The kernel's own shard_map axes, over an abstract mesh (no
            # TPU devices needed), which is also the context mesh there.
            mesh = jax.sharding.AbstractMesh(tuple(axes.values()), tuple(axes))
            spec = jax.sharding.PartitionSpec()
            body = jx.shard_map(kernel, mesh=mesh, in_specs=tuple(spec for _ in specs), out_specs=spec)
            with jx.use_abstract_mesh(mesh):
                jax.jit(body).trace(*specs).lower(lowering_platforms=("tpu",))
        else:
            jax.jit(kernel).trace(*specs).lower(lowering_platforms=("tpu",))
    except Exception as e:  # noqa: BLE001 - a note, not the kernel's failure
        first = (str(e).strip().splitlines() or [""])[0]
        print(
            f"mosaic_rt: debug=True: the Pallas TPU lowering of this kernel failed, so there is no Mosaic "
            f"module to print ({type(e).__name__}: {first})"
        )
    sys.stdout.flush()
