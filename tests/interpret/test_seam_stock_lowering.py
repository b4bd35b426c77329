"""Importing mosaic_rt changes nothing for a pallas_call that is not ours.

mosaic_rt wraps pallas_call's lowering rule (interpret/launch/seam.py). A
kernel lowered for the TPU (interpret=False) or with stock's
``pltpu.InterpretParams`` must lower to the same module with and without
mosaic_rt imported: on one device, under ``shard_map`` over a concrete mesh
and over an ``AbstractMesh`` (which has no devices: reading them raises), and
for a TPU from this CPU host (``lowering_platforms=("tpu",)``). Each side
runs in a fresh interpreter, one importing mosaic_rt first, and prints every
case's lowered text (or its error); the texts must be equal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_PROGRAM = textwrap.dedent(
    """
    import json, sys
    if sys.argv[1] == "with":
        import mosaic_rt  # noqa: F401  (installs the seam)
    import jax, jax.numpy as jnp, numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import PartitionSpec as P

    N = 4
    ROWS = 8

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def blocked(interpret):
        return pl.pallas_call(
            add_one,
            out_shape=jax.ShapeDtypeStruct((2 * ROWS, 128), jnp.float32),
            grid=(2,),
            in_specs=[pl.BlockSpec((ROWS, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((ROWS, 128), lambda i: (i, 0)),
            interpret=interpret,
        )

    def right_permute_kernel(x_ref, o_ref, send, recv):
        me = jax.lax.axis_index("x")
        right = jax.lax.rem(me + 1, N)
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send, recv, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
        )
        copy.start()
        copy.wait()

    def right_permute(interpret):
        return pl.pallas_call(
            right_permute_kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            interpret=interpret,
        )

    def sharded(mesh, kernel):
        return jax.shard_map(kernel, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)

    x1 = jax.ShapeDtypeStruct((2 * ROWS, 128), jnp.float32)
    concrete = jax.sharding.Mesh(np.array(jax.devices()[:N]), ("x",))
    abstract = jax.sharding.AbstractMesh((N,), ("x",))
    xn = jax.ShapeDtypeStruct((N * ROWS, 128), jnp.float32,
                              sharding=jax.sharding.NamedSharding(abstract, P("x")))
    x2n = jax.ShapeDtypeStruct((N * 2 * ROWS, 128), jnp.float32,
                               sharding=jax.sharding.NamedSharding(abstract, P("x")))
    xn_placed = jax.ShapeDtypeStruct((N * ROWS, 128), jnp.float32,
                                     sharding=jax.sharding.NamedSharding(concrete, P("x")))

    cases = {
        "one_device_tpu": lambda: jax.jit(blocked(False)).trace(x1).lower(lowering_platforms=("tpu",)),
        "one_device_stock_interpret_cpu": lambda: jax.jit(blocked(pltpu.InterpretParams())).lower(x1),
        "concrete_mesh_tpu": lambda: jax.jit(sharded(concrete, right_permute(False))).trace(xn_placed).lower(
            lowering_platforms=("tpu",)),
        "abstract_mesh_tpu": lambda: jax.jit(sharded(abstract, right_permute(False))).trace(xn).lower(
            lowering_platforms=("tpu",)),
        "abstract_mesh_blocked_tpu": lambda: jax.jit(sharded(abstract, blocked(False))).trace(x2n).lower(
            lowering_platforms=("tpu",)),
        "concrete_mesh_stock_interpret_cpu": lambda: jax.jit(
            sharded(concrete, right_permute(pltpu.InterpretParams()))).lower(xn_placed),
    }
    out = {}
    for name, lower in cases.items():
        try:
            out[name] = {"text": lower().as_text()}
        except Exception as e:  # noqa: BLE001 - an error must be the same on both sides too
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    """
)


def _lowered(side: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    done = subprocess.run([sys.executable, "-c", _PROGRAM, side], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def both_sides():
    return _lowered("without"), _lowered("with")


CASES = [
    "one_device_tpu",
    "one_device_stock_interpret_cpu",
    "concrete_mesh_tpu",
    "abstract_mesh_tpu",
    "abstract_mesh_blocked_tpu",
    "concrete_mesh_stock_interpret_cpu",
]


@pytest.mark.parametrize("case", CASES)
def test_stock_kernel_lowers_the_same_with_mosaic_rt_imported(both_sides, case):
    without, with_ours = both_sides
    assert "error" not in without[case], f"the case itself must lower without mosaic_rt: {without[case]}"
    assert with_ours[case] == without[case]


def test_tpu_lowering_has_the_mosaic_call(both_sides):
    """The cases lower what a TPU runs (a Mosaic custom call), not an interpreter."""
    _, with_ours = both_sides
    for case in CASES:
        text = with_ours[case]["text"]
        if case.endswith("_tpu"):
            assert "tpu_custom_call" in text, case
        else:
            assert "tpu_custom_call" not in text, case
