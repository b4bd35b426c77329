"""`mosaic_rt.simulate_tpu` / `set_simulated_tpu`: the simulated TPU host
as a Python API, in this process (the pytest flag's cases run in fresh
processes: tests/api/test_pytest_simulate.py)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.interpret.launch.kernel as kernel_module
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from mosaic_rt.simulate import chips, gates


@pytest.fixture
def seen(monkeypatch):
    """The params of every kernel that reached mosaic_rt's interpreter."""
    calls = []
    real = kernel_module.interpret_pallas_call

    def spy(*args, interpret_params, **kwargs):
        calls.append(interpret_params)
        return real(*args, interpret_params=interpret_params, **kwargs)

    monkeypatch.setattr(kernel_module, "interpret_pallas_call", spy)
    yield calls
    mosaic_rt.set_simulated_tpu(None)


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


X = jnp.zeros((8, 128), jnp.float32)


def test_a_block_simulates_and_everything_comes_back(seen):
    f = jax.jit(pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype), interpret=True))
    assert (f(X) == 1).all() and seen == []  # jax's HLO interpreter
    with mosaic_rt.simulate_tpu("v7x", params={"wait_timeout": 9}) as sim:
        assert sim.chip.device_kind == "TPU7x" and sim.params == {"wait_timeout": 9}
        assert mosaic_rt.simulated_tpu() is sim
        assert jax.default_backend() == "tpu" and jax.devices()[0].device_kind == "TPU7x"
        assert jax.devices()[3].coords == (1, 0, 0) and jax.devices()[3].core_on_chip == 1
        assert pltpu.get_tpu_info().vmem_capacity_bytes == 64 << 20
        # Jitted before the block: traced again inside it, on mosaic_rt.
        assert (f(X) == 1).all() and len(seen) == 1 and seen[0].wait_timeout == 9
    assert mosaic_rt.simulated_tpu() is None
    assert jax.default_backend() == "cpu" and jax.devices()[0].device_kind == "cpu"
    assert not hasattr(jax.devices()[0], "coords")
    with pytest.raises(ValueError, match="Unsupported TPU device kind"):
        pltpu.get_tpu_info()
    assert (f(X) == 1).all() and len(seen) == 1  # jax's HLO interpreter again


def test_a_nested_block_and_the_process_wide_call(seen):
    mosaic_rt.set_simulated_tpu("v5e")
    assert jax.devices()[0].device_kind == "TPU v5 lite"
    with mosaic_rt.simulate_tpu("v4", disable="default_backend"):
        assert jax.devices()[0].device_kind == "TPU v4" and jax.default_backend() == "cpu"
    assert jax.devices()[0].device_kind == "TPU v5 lite" and jax.default_backend() == "tpu"
    out = pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype))(X)
    assert (out == 1).all() and len(seen) == 1  # interpret=False: on mosaic_rt
    assert mosaic_rt.set_simulated_tpu(None) is None
    assert jax.devices()[0].device_kind == "cpu"


def test_a_kernel_error_leaves_the_block_as_its_own_type(seen):
    def oob(x_ref, o_ref, buf, sem):
        start = pl.program_id(0) + 4  # traced: only the DMA engine sees it is out of bounds
        pltpu.make_async_copy(x_ref.at[pl.ds(start, 8)], buf, sem).start()
        pltpu.make_async_copy(x_ref.at[pl.ds(start, 8)], buf, sem).wait()
        o_ref[...] = buf[...]

    with pytest.raises(IndexError, match="Out-of-bounds read"):
        with mosaic_rt.simulate_tpu("v6e"):
            pl.pallas_call(
                oob,
                out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype),
                grid=(1,),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.DMA],
            )(X).block_until_ready()
    assert mosaic_rt.simulated_tpu() is None and jax.default_backend() == "cpu"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"chip": "v3"}, ValueError, "unknown TPU chip 'v3'; choose one of v4, v5e, v5p, v6e, v7x"),
        ({"chip": "v6e", "params": {"nope": 1}}, TypeError, "nope"),
        ({"chip": "v6e", "params": "x"}, ValueError, "'x' is not KEY=VALUE"),
        ({"chip": "v6e", "disable": ("tpu_info", "gpu")}, ValueError, "unknown gate 'gpu'"),
        ({"chip": "v6e", "interpreter": "hlo"}, ValueError, "interpreter=) must be one of mosaic_rt, stock"),
        ({"chip": "v6e", "params": {"wait_timeout": [1]}}, TypeError, "hashable"),
    ],
)
def test_bad_arguments_are_errors_of_the_right_type(seen, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        mosaic_rt.set_simulated_tpu(**kwargs)
    assert mosaic_rt.simulated_tpu() is None


def test_every_gate_has_a_function_and_help():
    assert set(gates.GATE_FUNCTIONS) == set(chips.GATES) == set(chips.GATE_HELP)
    assert chips.DEFAULT_CHIP in chips.CHIPS
    assert chips.parse_gates("all") == frozenset(chips.GATES)


@pytest.mark.parametrize(
    ("chip", "names"),
    [("v4", {"v4"}), ("v5e", {"v5", "v5e"}), ("v5p", {"v5", "v5p"}), ("v6e", {"v6", "v6e"}), ("v7x", {"v7x"})],
)
def test_jtu_names_are_what_jtu_matches_on_the_chips_device_kind(chip, names):
    # jtu.is_device_tpu(7) is False on a v7x ("v7" is not in "TPU7x").
    assert gates.jtu_names(chips.CHIPS[chip]) == names


def test_params_text():
    assert chips.parse_params("a=1 b=true, c=on_wait d=None e=0.5") == {
        "a": 1,
        "b": True,
        "c": "on_wait",
        "d": None,
        "e": 0.5,
    }


@pytest.mark.parametrize("chip", ["v5e", "v5p"])
def test_a_tensorcore_mesh_made_inside_shard_map_has_the_chips_cores(seen, chip):
    # Inside shard_map jax reads a device's cores from the abstract mesh,
    # which has none for CPU devices: TensorCoreMesh() got num_cores=None
    # and lax.axis_size of its axis raised a TypeError.
    # A mesh made before the simulation: jax interns meshes (and their
    # abstract meshes), so code under test may get one made earlier.
    devices = jax.devices()[:2]
    mesh = jax.sharding.Mesh(devices, ("x",))
    assert mesh.abstract_mesh.abstract_device.num_cores is None
    with mosaic_rt.simulate_tpu(chip) as sim:
        cores = sim.chip.cores_per_device
        x = jnp.arange(len(devices) * cores * 8 * 128, dtype=jnp.int32).reshape(len(devices), cores, 8, 128)
        x = jax.device_put(x, jax.sharding.NamedSharding(mesh, P("x")))
        seen_cores = []

        def copy_each_core(x_ref, o_ref):
            n = jax.lax.axis_size("core")
            seen_cores.append(n)
            core = jax.lax.axis_index("core")
            pltpu.sync_copy(x_ref.at[:, core], o_ref.at[:, core])

        def body(x):
            if hasattr(pltpu, "TensorCoreMesh"):  # jax >= 0.11
                tc = pltpu.TensorCoreMesh(axis_name="core")
                assert pltpu.get_tpu_info().num_cores == cores
            else:
                tc = pltpu.create_tensorcore_mesh("core")
            assert tc.shape == {"core": cores}
            return pl.kernel(copy_each_core, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=tc)(x)

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        assert (f(x) == x).all()
        assert seen_cores and set(seen_cores) == {cores} and seen


def _per_core_first_step_kernel(flag_ref, x_ref, o_ref, scratch):
    # Each core's first step finds its own flag set (scalar prefetch lives
    # in each core's SMEM), as paged attention's megacore modes rely on.
    @pl.when(flag_ref[0] == 1)
    def _():
        scratch[...] = jnp.zeros_like(scratch)
        flag_ref[0] = 0

    scratch[...] += x_ref[...]
    o_ref[...] = scratch[...]


def _per_core_first_step(x):
    return pl.pallas_call(
        _per_core_first_step_kernel,
        out_shape=jax.ShapeDtypeStruct((2, 8, 128), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(2, 3),
            in_specs=[pl.BlockSpec((None, None, 8, 128), lambda c, i, flag: (c, i, 0, 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda c, i, flag: (c, 0, 0)),
            scratch_shapes=[pltpu.VMEM((8, 128), x.dtype)],
        ),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(jnp.ones((1,), jnp.int32), x)


def test_a_megacore_chip_splits_parallel_grid_dimensions_between_its_cores(seen):
    x = jnp.arange(2 * 3 * 8 * 128, dtype=jnp.float32).reshape(2, 3, 8, 128)
    want = x.sum(axis=1)
    with mosaic_rt.simulate_tpu("v5p") as sim:
        assert sim.params == {"num_cores_or_threads": 2}
        assert (_per_core_first_step(x) == want).all()
        assert seen[-1].num_cores_or_threads == 2
    # One core (a chip without megacore, or the user's choice) runs both
    # halves in turn: the second half's first step finds the flag cleared.
    with mosaic_rt.simulate_tpu("v5p", params={"num_cores_or_threads": 1}) as sim:
        assert sim.params == {"num_cores_or_threads": 1}
        got = _per_core_first_step(x)
        assert (got[0] == want[0]).all() and (got[1] == want[0] + want[1]).all()
    with mosaic_rt.simulate_tpu("v6e") as sim:
        assert sim.params == {}
