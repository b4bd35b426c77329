"""The TPU compile check on kernels that interpret correctly but cannot run
on a TPU (tests/support/kernels/tpu_invalid.py), on every generation libtpu knows:
each broken kernel is rejected with the compiler's own message where the
corpus says, compiles and gives the right answer elsewhere, and its fix
passes. Also what `get_tpu_info()` answers per generation, checked against
jax's own answer for the topology's device and the capacities the compiler
itself enforces.

Needs libtpu (skips without it on a developer's machine, fails in CI)."""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels.tpu_invalid import COMPILER, CORPUS, GENERATIONS, LOWERING, MiB
from mosaic_rt.tpu_check import check, targets, tpu_info


def _has_libtpu() -> bool:
    try:
        import libtpu  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def libtpu():
    if not _has_libtpu():
        message = f"libtpu is not installed ({check.install_command()})"
        if os.environ.get("CI"):
            pytest.fail(message + ": CI must install it (scripts/test.sh)")
        pytest.skip(message)


@pytest.fixture(autouse=True)
def no_process_target(monkeypatch):
    monkeypatch.delenv(targets.ENV_TARGET, raising=False)
    monkeypatch.delenv(targets.ENV_MODE, raising=False)
    targets.set_default_target(None)
    yield
    targets.set_default_target(None)


# v7x is the newest generation: an older libtpu may not know it. Every other
# one must work.
OPTIONAL = {"v7x"}


@pytest.fixture
def generation(request, libtpu):
    gen = request.param
    try:
        check.topology(gen)
    except RuntimeError as e:
        if gen in OPTIONAL:
            pytest.skip(f"the installed libtpu has no {gen} topology: {e}")
        raise
    return gen


def _params(target):
    return mosaic_rt.InterpretParams(tpu_target=target)


def _run(build, args, target):
    return jax.tree.map(np.asarray, jax.block_until_ready(build(_params(target))(*args)))


def _assert_right_answer(case, out):
    want = case.reference(*case.args)
    np.testing.assert_array_equal(out, np.asarray(want).astype(out.dtype))


def _ids(cases):
    return [c.name for c in cases]


# ------------------------------------------------------------ the corpus


@pytest.mark.parametrize("case", CORPUS, ids=_ids(CORPUS))
def test_broken_and_fixed_interpret_correctly(case):
    # tpu_target=(): no check, whatever the process asks for.
    _assert_right_answer(case, _run(case.broken, case.args, ()))
    _assert_right_answer(case, _run(case.fixed, case.args, ()))


@pytest.mark.parametrize("generation", GENERATIONS, indirect=True)
@pytest.mark.parametrize("case", CORPUS, ids=_ids(CORPUS))
def test_broken_kernel_per_generation(case, generation):
    fragment = case.rejects.get(generation)
    if fragment is None:  # fits this generation: compiles, runs, right answer
        _assert_right_answer(case, _run(case.broken, case.args, generation))
        return
    with pytest.raises(mosaic_rt.TpuCompileError) as info:
        _run(case.broken, case.args, generation)
    e = info.value
    assert fragment in e.compiler_message, e.compiler_message
    assert e.generation == generation and e.kernel == case.kernel
    assert e.source and "tpu_invalid.py:" in e.source
    text = str(e)
    assert f"does not compile for TPU {generation}" in text and fragment in text
    stage = {LOWERING: "the Pallas TPU lowering says", COMPILER: "the Mosaic / XLA:TPU compiler says"}[case.stage]
    assert stage in text


@pytest.mark.parametrize("generation", GENERATIONS, indirect=True)
@pytest.mark.parametrize("case", CORPUS, ids=_ids(CORPUS))
def test_fixed_kernel_per_generation(case, generation):
    fragment = case.fixed_rejects.get(generation)
    if fragment is None:
        _assert_right_answer(case, _run(case.fixed, case.args, generation))
        return
    with pytest.raises(mosaic_rt.TpuCompileError, match=re.escape(fragment)):
        _run(case.fixed, case.args, generation)


def test_corpus_covers_every_kind_of_rejection():
    names = {c.name for c in CORPUS}
    assert {
        "tiling_sublanes",
        "vmem_blocks_over_scoped_limit",
        "vmem_scratch_over_capacity",
        "lane_unaligned_dynamic_slice",
        "unsupported_reshape",
        "int8_matmul_without_int8_mxu",
        "smem_overflow",
        "too_many_dma_semaphores",
    } <= names
    # Some rejections depend on the generation: the same kernel compiles on
    # another one (the point of naming a target).
    for case in CORPUS:
        assert case.rejects, case.name
    by_generation = [c for c in CORPUS if set(c.rejects) != set(GENERATIONS)]
    assert {c.name for c in by_generation} >= {
        "vmem_blocks_over_scoped_limit",
        "vmem_scratch_over_capacity",
        "int8_matmul_without_int8_mxu",
        "too_many_dma_semaphores",
    }
    # and v5e vs v6e, the pair a suite is usually checked for, differ on one.
    assert any(("v5e" in c.rejects) != ("v6e" in c.rejects) for c in CORPUS)


# ------------------------------------------------------- generations


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _copy_blocks(block, target):
    return pl.pallas_call(
        _copy,
        out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(16 // block[0],),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=_params(target),
    )


X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)


@pytest.mark.parametrize("generation", GENERATIONS, indirect=True)
def test_every_generation_compiles_a_kernel_and_rejects_one(generation):
    np.testing.assert_array_equal(np.asarray(_copy_blocks((8, 128), generation)(X)), X)
    with pytest.raises(mosaic_rt.TpuCompileError, match=f"(?s)TPU {generation}.*divisible by 8"):
        _copy_blocks((4, 128), generation)(X)


@pytest.mark.parametrize("generation", GENERATIONS, indirect=True)
def test_get_tpu_info_is_jaxs_answer_for_the_topologys_device(generation):
    device = check.topology(generation).devices[0]
    kind, cores = tpu_info.DEVICE_KINDS[generation]
    assert (device.device_kind, device.num_cores) == (kind, cores)
    # jax's own answer when tracing for that device ...
    mesh = jax.sharding.Mesh(np.array([device]), ("_one",))
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        theirs = pltpu.get_tpu_info()
    # ... is what get_tpu_info() answers on CPU with the generation as target.
    targets.set_default_target(generation)
    ours = pltpu.get_tpu_info()
    assert ours == theirs
    assert ours.chip_version.value == {"v7x": "7x"}.get(generation, generation)
    assert ours.generation == int(generation[1])
    assert ours.num_cores == cores
    assert (ours.num_lanes, ours.num_sublanes) == (128, 8)


MEASURED = {  # per generation: (VMEM per core MiB, TensorCores per device)
    "v4": (16, 1),
    "v5e": (128, 1),
    "v5p": (64, 2),
    "v6e": (128, 1),
    "v7x": (64, 1),
}


@pytest.mark.parametrize("generation", GENERATIONS, indirect=True)
def test_get_tpu_info_capacities_are_the_compilers(generation):
    targets.set_default_target(generation)
    info = pltpu.get_tpu_info()
    vmem_mib, cores = MEASURED[generation]
    assert info.vmem_capacity_bytes == vmem_mib * MiB and info.num_cores == cores
    assert info.smem_capacity_bytes == MiB

    # One MiB more scratch than get_tpu_info() says there is (with the
    # scoped limit out of the way): the compiler names the same capacity.
    def over(memory, nbytes, dtype, shape):
        def kernel(x_ref, o_ref, s_ref):
            o_ref[...] = x_ref[...]

        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            scratch_shapes=[memory(shape, dtype)],
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=2 * info.vmem_capacity_bytes),
            interpret=_params(generation),
        )
        with pytest.raises(mosaic_rt.TpuCompileError) as e:
            call(X[:8])  # rejected at lowering: the scratch is never allocated
        return e.value.compiler_message

    vmem = info.vmem_capacity_bytes + MiB
    text = over(pltpu.VMEM, vmem, jnp.float32, (vmem // 512, 128))
    assert f"would exceed memory (size={info.vmem_capacity_bytes})" in text and "vmem" in text
    smem = info.smem_capacity_bytes + 4096
    text = over(pltpu.SMEM, smem, jnp.int32, (smem // 4,))
    assert f"would exceed memory (size={info.smem_capacity_bytes})" in text and "smem" in text
