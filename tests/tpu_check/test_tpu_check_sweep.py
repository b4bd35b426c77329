"""No false positives: every kernel of the repository's corpora and of the
bench, run under mosaic_rt with the TPU compile check on for v5e and v6e
(``tpu_check="warn"``, so each kernel still runs and both generations are
checked), compiles for both -- except the kernels listed in `REJECTED`,
which are really invalid for those chips (each says why; every rejection
measured here is the same on v5e and v6e, jax 0.10.2 and 0.12.0.1).

Corpora: tests/support/kernels/single_device.py, tests/support/kernels/multi_device.py,
jax's production ops of tests/production/test_production_kernels.py, and the bench's
kernel sets (mosaic_rt.bench: the suite, the zoo, the launch kernel, the
cold-call variants, the production row). The check caches per kernel, so
kernels shared between corpora compile once.

Needs libtpu (skips without it on a developer's machine, fails in CI)."""

from __future__ import annotations

import os
import re
import warnings

import jax
import mosaic_rt
import numpy as np
import production_cases
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from kernels import multi_device, single_device
from mosaic_rt.bench import cold, launch, production, suite, zoo
from mosaic_rt.tpu_check import check, targets
from parity import run_case

TARGET = ("v5e", "v6e")

_TILING = "divisible by 8 and 128 respectively"

# "corpus/kernel" -> (fragment of the compiler's message on v5e and v6e, why).
REJECTED = {
    "single_device/add_int8": (
        "Only vector<i16> and vector<i32> are supported, but got 'i8'",
        "int8 elementwise add: no TPU vector unit has int8 arithmetic",
    ),
    "single_device/bool_logic": (
        _TILING,
        "(1, 128) blocks of a (2, 128) array: the sublane dim is neither a multiple of 8 nor the whole array",
    ),
    "single_device/matmul_f32_acc": (_TILING, "(16, 16) blocks: lane dims of 16, neither 128-multiples nor whole"),
    "single_device/matmul_bf16_in_f32_acc": (_TILING, "(16, 8) / (8, 16) blocks: lane dims of 8 and 16"),
    "single_device/padding_block_sum": (_TILING, "(1, 128) output blocks of a (2, 128) output"),
    "single_device/padding_block_sum_zero": (_TILING, "the same kernel as padding_block_sum"),
    "single_device/buffered_pipeline_mode": (
        "Only single (1) and double (2) buffering are supported. Got 3.",
        "pl.Buffered(3): this jax's TPU pipeline has at most 2 buffers",
    ),
    "single_device/element_block_dim": (
        "All block dimensions must be Elements or none of them can be Elements",
        "pl.Element on one block dim and a plain size on the other",
    ),
    "single_device/scan_over_rows": (
        "Scan with 1 extensive argument(s) is not supported",
        "lax.scan over xs (jnp.arange(8)): the TPU lowering scans over a carry only (fori_loop compiles)",
    ),
    "single_device/error_hbm_ref_read_directly": (
        "Loads are only allowed on VMEM and SMEM references",
        "an error case: loads straight from a pl.ANY ref; the TPU rejects it as the interpreter does",
    ),
    "single_device/dma_with_grid_blocked_output": (
        "DMA source and target shape mismatch",
        "our kernel is invalid for the TPU, the check is right: the output block "
        "(None, 8, 128) stays a 1x8x128 VMEM buffer in the Pallas TPU lowering and a "
        "DMA into the ref passes that buffer unsqueezed (8x128 from HBM into 1x8x128), "
        "which Mosaic's verifier rejects; jax compiling the kernel directly says the "
        "same (test_dma_into_a_squeezed_block_is_rejected_by_pallas_itself)",
    ),
    "zoo/matmul blocks=2": (_TILING, "(64, 64) blocks of a (128, 128) matmul: lane dims of 64"),
    "cold/matmul": (_TILING, "the cold-call variants give every call new shapes: (136, 136) tiles"),
}


# The check's own bug (a kernel a TPU compiles, rejected): on jax 0.12 a
# core_map kernel with run_scoped scratch under a CPU shard_map fails with
# "Unsupported TPU device kind: cpu". The kernel's jaxpr equations were traced
# under the CPU shard_map's abstract mesh, which each equation's context
# carries (device kind "cpu") and restores when the Pallas TPU lowering runs
# its body, so run_scoped's get_tpu_info() asks for chip "cpu" instead of the
# target's. jax 0.10.2 / 0.11.0 compile both kernels for v5e and v6e.
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


def _params(**knobs):
    return mosaic_rt.InterpretParams(tpu_target=TARGET, tpu_check="warn", wait_timeout=60.0, **knobs)


# -- running one kernel of each corpus ------------------------------------------------


def _corpus_case(case):
    def run():
        result = run_case(case, _params())
        if case.expect_error is not None or case.ours_error is not None:
            return  # an error case: its own error is the point, the compile is checked
        if isinstance(result, Exception):
            raise result

    return run


def _suite_case(c):
    def run():
        program, args = c.build()
        out = jax.block_until_ready(program(_params(detect_races=c.detect_races))(*args))
        np.testing.assert_array_equal(np.asarray(out), c.expect(*map(np.asarray, args)))

    return run


def _zoo_kernel(k):
    def run():
        program, args, expected = k.build()
        out = jax.block_until_ready(program(_params(**dict(k.knobs)))(*args))
        np.testing.assert_array_equal(np.asarray(out), expected)

    return run


def _cold_variant(variant):
    def run():
        program, args, expected = variant(0)
        np.testing.assert_array_equal(np.asarray(program(_params())(*args)), expected)

    return run


def _launch_kernel():
    fn, (x,) = launch.hbm_copy(128)
    np.testing.assert_array_equal(np.asarray(fn(_params())(x)), np.asarray(x))


def _production_row(build):
    def run():
        op, _, args = build()
        with mosaic_rt.force_interpret_mode(_params()):
            jax.block_until_ready(op()(*args))

    return run


def _production_case(c):
    def run():
        fn, args = c.build()
        with mosaic_rt.force_interpret_mode(_params()):
            jax.block_until_ready(fn(*args))

    return run


def _kernels():
    """(id, run, marks) for every kernel of every corpus."""
    out = [(f"single_device/{c.name}", _corpus_case(c), ()) for c in single_device.CASES]
    out += [(f"multi_device/{c.name}", _corpus_case(c), ()) for c in multi_device.CASES]
    out += [
        (
            f"production/{c.name}",
            _production_case(c),
            (pytest.mark.slow,) if c.slow else (),
        )  # slow in its own suite too
        for c in production_cases.CASES
    ]
    out += [(f"bench-suite/{c.name}", _suite_case(c), ()) for c in suite.suite(quick=False)]
    out += [(f"zoo/{k.name}", _zoo_kernel(k), ()) for k in zoo.kernels(0)]
    out += [("launch/hbm_copy", _launch_kernel, ())]
    out += [(f"cold/{name}", _cold_variant(v), ()) for name, v in cold._family_variants().items()]
    out += [
        (f"bench-production/{name}", _production_row(build), ()) for name, (build, _, _) in production.KERNELS.items()
    ]
    return out


def _param(kid, run, marks):
    return pytest.param(kid, run, marks=list(marks), id=kid)


KERNELS = [_param(*k) for k in _kernels()]
_WHO = re.compile(r"does not compile for TPU (\w+) ")


def _rejections(run) -> dict[str, list[str]]:
    """Runs one kernel; the check's message per generation that rejected it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    out: dict[str, list[str]] = {}
    for w in caught:
        if issubclass(w.category, mosaic_rt.TpuCompileWarning):
            text = str(w.message)
            out.setdefault(_WHO.search(text).group(1), []).append(text)
    return out


@pytest.mark.parametrize("kid, run", KERNELS)
def test_kernel_compiles_for_v5e_and_v6e(libtpu, kid, run):
    if kid.startswith("production/"):
        case = next(c for c in production_cases.CASES if f"production/{c.name}" == kid)
        if jax.device_count() < case.devices:
            pytest.skip(f"needs {case.devices} devices")
    got = _rejections(run)
    if kid not in REJECTED:
        assert not got, f"{kid}: a false positive?\n" + "\n".join(m for ms in got.values() for m in ms)
        return
    fragment, why = REJECTED[kid]
    assert set(got) == set(TARGET), (kid, why, got)
    for generation, messages in got.items():
        assert all(fragment in m for m in messages), (kid, generation, messages)


def test_every_expected_rejection_names_a_kernel():
    ids = {k[0] for k in _kernels()}
    assert set(REJECTED) <= ids
    # every corpus was found, each with all its kernels
    assert {i.split("/")[0] for i in ids} == {
        "single_device",
        "multi_device",
        "production",
        "bench-suite",
        "zoo",
        "launch",
        "cold",
        "bench-production",
    }
    assert sum(i.startswith("single_device/") for i in ids) == len(single_device.CASES)
    assert sum(i.startswith("zoo/") for i in ids) == len(zoo.kernels(0))


# -- the one rejection that looked like the check's fault -------------------------------


def test_dma_into_a_squeezed_block_is_rejected_by_pallas_itself(libtpu):
    """single_device's dma_with_grid_blocked_output, compiled by jax for v5e
    without mosaic_rt (interpret=False): the same verifier error, so the
    kernel, not the check, is at fault. The same DMA into an explicit
    size-1 block dim compiles (through the check) and gives the same answer."""
    case = single_device.CASES_BY_NAME["dma_with_grid_blocked_output"]
    (x,) = case.args
    device = check.topology("v5e").devices[0]
    mesh = Mesh(np.array([device]), ("_one",))
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P()))
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), jax.default_device(device):
        with pytest.raises(Exception, match="DMA source and target shape mismatch"):
            jax.jit(lambda x: case.fn(False, x)).trace(spec).lower().compile()

    def kernel(x_hbm, o_ref, sem):
        i = pl.program_id(0)
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(3 - i, 1)], o_ref, sem)
        copy.start()
        copy.wait()
        o_ref[...] += i.astype(np.float32)

    fixed = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(4,),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((1, 8, 128), lambda i: (i, 0, 0)),
        scratch_shapes=[pltpu.SemaphoreType.DMA],
        interpret=mosaic_rt.InterpretParams(tpu_target=TARGET),
    )
    np.testing.assert_array_equal(np.asarray(fixed(x)), case.reference(x))
