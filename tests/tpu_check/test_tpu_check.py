"""The TPU compile check: kernels that interpret fine but would
not compile for a TPU generation fail with the real compiler's message.

Tests that compile need libtpu (the version the installed jax pins: see
`mosaic_rt.tpu_check.install_command()`); without it they skip on a
developer's machine and fail in CI (``CI`` set), where scripts/test.sh
installs it."""

import functools
import importlib.metadata
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from mosaic_rt.tpu_check import check, targets

pytest_plugins = ["pytester"]


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
def clean(monkeypatch):
    monkeypatch.delenv(targets.ENV_TARGET, raising=False)
    monkeypatch.delenv(targets.ENV_MODE, raising=False)
    monkeypatch.setenv("MOSAIC_RT_TPU_CACHE_DIR", "off")  # every compile counted here
    targets.set_default_target(None)
    check.clear_cache()
    yield
    targets.set_default_target(None)


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def blocked(block, *, rows=16, **params):
    """x + 1 over a (rows, 128) array in blocks of ``block``."""
    return pl.pallas_call(
        add_one,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        grid=(rows // block[0],),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(**params),
    )


def with_scratch(scratch_rows, **params):
    """One (8, 128) block through a f32 VMEM scratch of ``scratch_rows`` rows."""

    def kernel(x_ref, o_ref, s_ref):
        s_ref[0:8, :] = x_ref[...]
        o_ref[...] = s_ref[0:8, :] * 2.0

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec((8, 128), lambda: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda: (0, 0)),
        scratch_shapes=[pltpu.VMEM((scratch_rows, 128), jnp.float32)],
        interpret=mosaic_rt.InterpretParams(**params),
    )


X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

# ------------------------------------------------------------ parameters


def test_tpu_target_validation():
    for good in (None, (), "v5e", ("v5e", "v6e"), "v7x", "tpu7x", "V6E", ["v4", "v5p"]):
        mosaic_rt.InterpretParams(tpu_target=good)
    with pytest.raises(ValueError, match="unknown TPU generation 'v9'.*known: 'v4'"):
        mosaic_rt.InterpretParams(tpu_target="v9")
    with pytest.raises(ValueError, match="unknown TPU generation"):
        mosaic_rt.InterpretParams(tpu_target=("v5e", "tpu"))
    with pytest.raises(TypeError, match="tpu_target must be a TPU generation"):
        mosaic_rt.InterpretParams(tpu_target=5)
    with pytest.raises(TypeError, match="a TPU generation is a string"):
        mosaic_rt.InterpretParams(tpu_target=("v5e", 4))
    with pytest.raises(ValueError, match="tpu_check must be 'raise', 'warn' or None"):
        mosaic_rt.InterpretParams(tpu_check="error")
    assert targets.normalize_target(("tpu7x", "v7x", "v5e")) == ("v7x", "v5e")
    assert targets.normalize_target("v5e, v6e") == ("v5e", "v6e")


def test_resolution_order(monkeypatch):
    params = mosaic_rt.InterpretParams()
    assert targets.resolve(params) == ((), "raise")
    monkeypatch.setenv(targets.ENV_TARGET, "v5e,v6e")
    monkeypatch.setenv(targets.ENV_MODE, "warn")
    assert targets.resolve(params) == (("v5e", "v6e"), "warn")
    assert targets.resolve(mosaic_rt.InterpretParams(tpu_target=(), tpu_check="raise")) == ((), "raise")
    targets.set_default_target("v4")
    assert targets.resolve(params) == (("v4",), "warn")
    assert targets.resolve(mosaic_rt.InterpretParams(tpu_target="v7x")) == (("v7x",), "warn")
    monkeypatch.setenv(targets.ENV_TARGET, "v8")
    targets.set_default_target(None)
    with pytest.raises(ValueError, match="MOSAIC_RT_TPU_TARGET: unknown TPU generation 'v8'"):
        targets.resolve(params)


def test_topology_names():
    assert check.topology_name("v5e") == "v5e:2x2"
    assert check.topology_name("v6e", 8) == "v6e:4x2"
    assert check.topology_name("v5p") == "v5p:2x2x1"
    assert check.topology_name("v7x") == "tpu7x:2x2x1"


def test_no_target_no_check():
    out = blocked((4, 128))(X)  # invalid for a TPU, fine to interpret
    np.testing.assert_array_equal(np.asarray(out), X + 1)
    assert check.stats.compiles == 0


def test_import_loads_no_tpu_compiler():
    code = (
        "import sys, mosaic_rt\n"
        "from jax._src.lib import xla_client\n"
        "assert 'jax.experimental.topologies' not in sys.modules\n"
        "assert 'mosaic_rt.tpu_check.check' not in sys.modules\n"
        "assert not xla_client.pjrt_plugin_loaded('tpu')\n"
        "import jax; print(jax.default_backend())\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "cpu"
    assert "TPU" not in run.stderr


def test_without_libtpu_one_clear_error(monkeypatch):
    def missing():
        raise ImportError("No module named 'libtpu'")

    monkeypatch.setattr(check, "_import_libtpu", missing)
    monkeypatch.setattr(check, "_topologies", {})
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    with pytest.raises(ImportError, match=r"needs libtpu.*pip install \"libtpu==") as info:
        blocked((8, 128), tpu_target="v5e")(X)
    spec = [r for r in importlib.metadata.requires("jax") if r.startswith("libtpu")]
    assert spec and spec[0].split(";")[0].replace(" ", "") in str(info.value)


# ------------------------------------------------------- with the compiler


def test_passing_kernel_passes(libtpu):
    out = blocked((8, 128), tpu_target=("v5e", "v6e"))(X)
    np.testing.assert_array_equal(np.asarray(out), X + 1)
    assert check.stats.compiles == 2 and check.stats.failures == 0
    (_, source, first), (_, _, second) = check.stats.records
    assert first.generation == "v5e" and second.generation == "v6e" and first.ok
    assert "add_one at" in source and "test_tpu_check.py" in source
    assert jax.default_backend() == "cpu"


def test_tiling_violation_fails_on_v5e(libtpu):
    with pytest.raises(mosaic_rt.TpuCompileError) as info:
        blocked((4, 128), tpu_target="v5e")(X)
    e = info.value
    text = str(e)
    assert text.startswith("kernel 'add_one' (add_one at ")
    assert "test_tpu_check.py:" in text and "does not compile for TPU v5e" in text
    assert "Pallas TPU lowering" in text
    assert "divisible by 8 and 128" in text and "block shape" in text
    assert "JAX has removed its internal frames" not in text
    assert isinstance(e, ValueError)
    assert e.generation == "v5e" and e.kernel == "add_one"
    assert "divisible by 8 and 128" in e.compiler_message
    assert isinstance(e.compiler_error, ValueError)


def test_vmem_overflow_fails_with_the_compilers_message(libtpu):
    # 32 MiB of scratch: within v5e's 128 MiB of VMEM, over v4's 16 MiB.
    out = with_scratch(64 * 1024, tpu_target="v5e")(X[:8])
    np.testing.assert_array_equal(np.asarray(out), X[:8] * 2)
    with pytest.raises(mosaic_rt.TpuCompileError, match="does not compile for TPU v4") as info:
        with_scratch(64 * 1024, tpu_target=("v5e", "v4"))(X[:8])
    text = str(info.value)
    assert "Mosaic / XLA:TPU compiler" in text and "RESOURCE_EXHAUSTED" in text
    assert "vmem" in text and "would exceed memory (size=16777216)" in text
    assert isinstance(info.value.compiler_error, jax.errors.JaxRuntimeError)


def test_warn_mode_warns_and_runs(libtpu):
    with pytest.warns(mosaic_rt.TpuCompileWarning, match="divisible by 8 and 128"):
        out = blocked((4, 128), tpu_target="v6e", tpu_check="warn")(X)
    np.testing.assert_array_equal(np.asarray(out), X + 1)


def test_cache_hit_compiles_once(libtpu):
    # Two pallas_calls of the same kernel: two lowerings, one compile.
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(blocked((8, 128), tpu_target="v5e")(X)), X + 1)
    assert (check.stats.compiles, check.stats.hits) == (1, 1)
    for _ in range(2):
        with pytest.raises(mosaic_rt.TpuCompileError, match="divisible by 8 and 128") as info:
            blocked((4, 128), tpu_target="v5e")(X)
    assert (check.stats.compiles, check.stats.hits, check.stats.failures) == (2, 2, 1)
    assert info.value.compiler_error is None  # answered from the cache
    # Another grid is another kernel.
    blocked((8, 128), rows=32, tpu_target="v5e")(np.zeros((32, 128), np.float32))
    assert check.stats.compiles == 3


def test_environment_variable(libtpu, monkeypatch):
    monkeypatch.setenv(targets.ENV_TARGET, "v5e")
    with pytest.raises(mosaic_rt.TpuCompileError, match="TPU v5e"):
        blocked((4, 128))(X)
    monkeypatch.setenv(targets.ENV_MODE, "warn")
    with pytest.warns(mosaic_rt.TpuCompileWarning, match="TPU v5e"):
        blocked((4, 128))(X)
    # tpu_target=() opts a kernel out.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        blocked((4, 128), tpu_target=())(X)


def _right_permute(n):
    def kernel(x_ref, o_ref, send_sem, recv_sem):
        dst = jax.lax.rem(jax.lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id={"x": dst})
        copy.start()
        copy.wait()

    return kernel


@pytest.mark.parametrize("generation", ["v5e", "v7x"])
def test_shard_map_kernel_compiles_on_a_topology_with_its_mesh(libtpu, generation):
    n = 4
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n]), ("x",))

    def run(block, kernel):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[pl.BlockSpec(block, lambda: (0, 0))],
            out_specs=pl.BlockSpec(block, lambda: (0, 0)),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            interpret=mosaic_rt.InterpretParams(tpu_target=generation),
        )
        f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        return np.asarray(f(np.repeat(np.arange(n, dtype=np.float32), 8 * 128).reshape(-1, 128)))

    # A remote DMA to the next device of the mesh: compiles for 4 chips.
    out = run((8, 128), _right_permute(n))
    np.testing.assert_array_equal(out[::8, 0], [3, 0, 1, 2])
    assert check.stats.compiles == 1 and check.stats.failures == 0

    def halves(x_ref, o_ref, send_sem, recv_sem):
        o_ref[...] = x_ref[...]

    with pytest.raises(mosaic_rt.TpuCompileError, match=f"(?s)TPU {generation}.*divisible by 8"):
        run((4, 128), halves)


def test_core_map_kernel_compiles(libtpu):
    # core_map's run_scoped lowering asks the chip kind at lowering time.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # renamed in 0.12
        mesh = core_mesh(1)
    x = jnp.asarray(X)

    @functools.partial(
        pl.kernel,
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        mesh=mesh,
        interpret=mosaic_rt.InterpretParams(tpu_target=("v5e", "v7x")),
    )
    def copy(x_hbm, o_hbm):
        pltpu.sync_copy(x_hbm, o_hbm)

    np.testing.assert_array_equal(np.asarray(copy(x)), X)
    assert (check.stats.compiles, check.stats.failures) == (2, 0)


def _core_map_run(scratch, body, tpu_target="v5e"):
    """``body(n, x_ref, o_ref, *scratch refs)`` in a one-core core_map over
    refs of an (8, 128) int32 array, ``n`` a traced scalar the kernel closes
    over; returns o_ref's final value."""
    params = mosaic_rt.InterpretParams(tpu_target=tpu_target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # core_map: renamed in 0.12
        mesh = core_mesh(1)

        @jax.jit
        def f(n, x):
            x_ref, o_ref = jax.new_ref(x), jax.new_ref(jnp.zeros_like(x))

            @pl.core_map(mesh, interpret=params)
            def _():
                pl.run_scoped(lambda *refs: body(n, x_ref, o_ref, *refs), *scratch)

            return jax.freeze(o_ref)

        return np.asarray(f(jnp.int32(3), jnp.asarray(X[:8].astype(np.int32))))


def test_core_map_kernel_compiles_as_the_tpu_lowers_it(libtpu):
    # jax 0.12 lowers core_map through mpmd_map, by a TPU rule of its own;
    # on CPU its fallback makes a pallas_call whose lowering rejects what
    # the TPU's takes: a core axis in a device id ("Unrecognized axes"),
    # the kernel's closed-over scalar as a rank-0 operand ("only blocks of
    # rank >= 1"). The check compiles the mpmd_map, as the TPU does.
    def body(n, x_ref, o_ref, sem, buf):
        pl.semaphore_signal(sem, 1, device_id={"core": 0})
        pl.semaphore_wait(sem, 1)
        pltpu.sync_copy(x_ref, buf)

        def step(i, carry):
            buf[...] += 1
            return carry

        jax.lax.fori_loop(0, n, step, 0)
        pltpu.sync_copy(buf, o_ref)

    out = _core_map_run([pltpu.SemaphoreType.REGULAR, pltpu.VMEM((8, 128), jnp.int32)], body)
    np.testing.assert_array_equal(out, X[:8].astype(np.int32) + 3)
    assert (check.stats.compiles, check.stats.failures) == (1, 0)


def test_core_map_kernel_the_tpu_rejects_still_fails(libtpu):
    # 160 MiB of VMEM scratch on a 128 MiB v5e: the compiler's verdict,
    # through the same mpmd_map path.
    def body(n, x_ref, o_ref, big):
        pltpu.sync_copy(x_ref, big.at[pl.ds(0, 8)])
        pltpu.sync_copy(big.at[pl.ds(0, 8)], o_ref)

    with pytest.raises(mosaic_rt.TpuCompileError, match="(?s)does not compile for TPU v5e.*RESOURCE_EXHAUSTED"):
        _core_map_run([pltpu.VMEM((320 * 1024, 128), jnp.int32)], body)
    assert (check.stats.compiles, check.stats.failures) == (1, 1)
    np.testing.assert_array_equal(
        _core_map_run([pltpu.VMEM((320 * 1024, 128), jnp.int32)], body, tpu_target=()), X[:8].astype(np.int32)
    )


# Kernels that hand semaphores to each other (jax's tpu_pallas_async_test):
# the check compiles each kernel as a program of its own, and XLA:TPU
# aborts the whole process -- SIGABRT, "Unsupported source memory space:
# sflag" -- on a program that returns a semaphore, and rejects one that takes
# a semaphore operand ("IsSflagMemorySpace"). Each runs in a process of its
# own, so a regression is this test's failure, not the end of the session.
_SEMAPHORE_KERNELS = """
import functools, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
import mosaic_rt
from mosaic_rt.tpu_check import check
sys.path.insert(0, {here!r})
from core_mesh import core_mesh

params = mosaic_rt.InterpretParams(tpu_target="v5e")
x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
if {case!r} == "between_kernels":
    def start_copy(x_ref, o_ref, sem):
        pltpu.make_async_copy(x_ref, o_ref, sem).start()

    def wait_copy(x_ref, sem, o_ref):
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    anywhere = pl.BlockSpec(memory_space=pl.ANY)
    in_semaphores = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
    start = pl.pallas_call(
        start_copy,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), pltpu.SemaphoreType.DMA(())),
        in_specs=[anywhere],
        out_specs=(anywhere, in_semaphores),
        interpret=params,
    )
    wait = pl.pallas_call(
        wait_copy,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[anywhere, in_semaphores],
        out_specs=anywhere,
        input_output_aliases={{0: 0}},
        interpret=params,
    )
    out = jax.jit(lambda x: wait(*start(x)))(x)
    assert np.array_equal(np.asarray(out), np.asarray(x))
else:
    # An output in SEMAPHORE memory (jax's
    # test_kernel_with_output_memory_space_SEMAPHORE lowers this one). The
    # TPU compiles it; the interpreter then refuses its copy into semaphore
    # memory by name (a compile failure would have come first, as a
    # TpuCompileError).
    xi = x.astype(jnp.int32)
    kernel = pl.kernel(
        lambda x_ref, o_ref: pltpu.sync_copy(x_ref, o_ref),
        out_type=pltpu.SEMAPHORE(xi.shape, xi.dtype),
        mesh=core_mesh(1),
        interpret=params,
    )
    try:
        jax.jit(kernel).lower(xi)
    except NotImplementedError as e:
        assert "a DMA into an array in SEMAPHORE memory" in str(e), e
print("compiled", check.stats.compiles, "failed", check.stats.failures)
"""


@pytest.mark.parametrize("case", ["between_kernels", "semaphore_memory_output"])
def test_kernels_taking_or_returning_semaphores_compile(libtpu, case):
    if case == "semaphore_memory_output" and not hasattr(pltpu, "SEMAPHORE"):
        pytest.skip("pltpu.SEMAPHORE(shape, dtype) is jax 0.11+")
    here = os.path.dirname(sys.modules[core_mesh.__module__].__file__)
    code = _SEMAPHORE_KERNELS.format(here=here, case=case)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1", "MOSAIC_RT_TPU_CACHE_DIR": "off"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stderr[-3000:]}"
    compiled = 2 if case == "between_kernels" else 1
    assert run.stdout.strip().splitlines()[-1] == f"compiled {compiled} failed 0", run.stdout


def test_sparse_core_kernel_is_left_to_the_sparse_core_compiler(caplog):
    # jax lowers a SparseCore core_map through its own path, not the
    # pallas_call the interpreter sees; compiling that with the TensorCore
    # lowering rejected every SparseCore kernel (tpu-inference's gathers):
    # the check leaves them alone, and says so once per kernel.
    plsc = pytest.importorskip("jax.experimental.pallas.tpu_sc")
    if not (hasattr(plsc, "VectorSubcoreMesh") and hasattr(pl, "kernel")):
        pytest.skip("this jax has no SparseCore meshes")
    from mosaic_rt.tpu_check.tpu_info import answering_for

    x = np.arange(16 * 128, dtype=np.int32).reshape(16, 128)

    def kernel(x_hbm, o_hbm):
        w = jax.lax.axis_index(("core", "subcore"))
        pltpu.sync_copy(x_hbm.at[pl.ds(w, 1)], o_hbm.at[pl.ds(w, 1)])

    with answering_for("v6e"), caplog.at_level("INFO", logger="mosaic_rt"):
        mesh = plsc.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore", num_cores=1)
        params = mosaic_rt.InterpretParams(tpu_target="v6e")
        f = pl.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh, interpret=params)
        for _ in range(2):
            np.testing.assert_array_equal(np.asarray(jax.block_until_ready(f(jnp.asarray(x)))), x)
    assert (check.stats.compiles, check.stats.failures) == (0, 0)
    notes = [r.getMessage() for r in caplog.records if "SparseCore kernel" in r.getMessage()]
    assert len(notes) == 1 and "not compiled for v6e" in notes[0], notes


SUITE = """
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
import mosaic_rt

def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

def test_small_blocks():
    f = pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       grid=(4,), in_specs=[pl.BlockSpec((4, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((4, 128), lambda i: (i, 0)),
                       interpret=mosaic_rt.InterpretParams())
    f(np.zeros((16, 128), np.float32))
"""


def _plugin_args() -> list[str]:
    """``-p`` for our plugin where the installed metadata lacks its entry point."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "mosaic_rt_tpu" in names else ["-p", "mosaic_rt_pytest.tpu_check"]


def test_pytest_option_and_ini(libtpu, pytester):
    pytester.makepyfile(test_suite=SUITE)
    args = _plugin_args() + ["-p", "no:cacheprovider"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    result = pytester.runpytest(*args, "--mosaic-rt-tpu-target=v5e")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*TpuCompileError: kernel 'add_one'*does not compile for TPU v5e*", "*divisible by 8 and 128*"]
    )
    assert targets.process_target() == ()  # unconfigure restored it
    result = pytester.runpytest(*args, "--mosaic-rt-tpu-target=v6e", "--mosaic-rt-tpu-check=warn")
    result.assert_outcomes(passed=1, warnings=1)
    pytester.makeini("[pytest]\nmosaic_rt_tpu_target = v5e\n")
    pytester.runpytest(*args).assert_outcomes(failed=1)
    assert pytester.runpytest(*args, "--mosaic-rt-tpu-target=v9").ret == pytest.ExitCode.USAGE_ERROR


# ------------------------------------------------- get_tpu_info on CPU


@pytest.mark.parametrize(
    "generation, vmem, version", [("v4", 16, 4), ("v5e", 128, 5), ("v5p", 64, 5), ("v6e", 128, 6), ("v7x", 64, 7)]
)
def test_get_tpu_info_answers_for_the_process_target(generation, vmem, version):
    targets.set_default_target(generation)
    info = pltpu.get_tpu_info()
    assert info.vmem_capacity_bytes == vmem * 2**20
    assert info.generation == version and info.num_lanes == 128

    # Inside a kernel too (traced on CPU): blocks sized by the chip.
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pltpu.get_tpu_info().vmem_capacity_bytes // 2**20

    out = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        interpret=mosaic_rt.InterpretParams(tpu_target=()),
    )(X[:8])
    np.testing.assert_array_equal(np.asarray(out), X[:8] + vmem)
    targets.set_default_target(None)
    with pytest.raises(ValueError, match="Unsupported TPU device kind"):
        pltpu.get_tpu_info()


def test_get_tpu_info_from_the_environment():
    code = (
        "import mosaic_rt\n"
        "from jax.experimental.pallas import tpu as pltpu\n"
        "print(pltpu.get_tpu_info().vmem_capacity_bytes)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu", targets.ENV_TARGET: "v5p,v6e"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(64 * 2**20)
