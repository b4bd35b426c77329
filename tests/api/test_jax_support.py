"""The supported jax range and the one module that touches JAX internals."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import warnings

import mosaic_rt
import pytest
from mosaic_rt import jax_internals as jx
from mosaic_rt import jax_version

PACKAGE = pathlib.Path(jx.__file__).parent


@pytest.mark.parametrize("version", ["0.10.1", "0.9.2", "0.10.1.dev20260101"])
def test_too_old_jax_is_one_clear_import_error(version):
    with pytest.raises(ImportError, match=rf"supports jax >= 0\.10\.2; found jax {re.escape(version)}"):
        jax_version.check_supported(version)


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.11.2", "0.12.0", "0.12.0.1", "0.12.1", "0.12.1rc1"])
def test_tested_jax_imports_silently(version):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax_version.check_supported(version)


@pytest.mark.parametrize("version", ["0.12.2", "0.13.0", "0.13.0.dev20270101", "1.0.0"])
def test_newer_jax_warns_once_naming_both_versions(version):
    newest = ".".join(map(str, jax_version.TESTED_NEWEST))
    with pytest.warns(mosaic_rt.UntestedJaxWarning) as record:
        jax_version.check_supported(version)
    assert len(record) == 1
    message = str(record[0].message)
    assert f"tested with jax 0.10.2 .. {newest}; found jax {version}, which is newer" in message


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_beside_a_newer_jax_warns_once():
    # A jax newer than the tested range (faked): mosaic_rt imports, with one
    # UntestedJaxWarning naming both versions, and still runs a kernel.
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "import jax; jax.__version__ = '0.99.0'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import mosaic_rt\n"
        "    import mosaic_rt.tpu, mosaic_rt.interpret\n"
        "mine = [w for w in caught if issubclass(w.category, mosaic_rt.UntestedJaxWarning)]\n"
        "print('WARNINGS', len(mine)); print('MESSAGE', mine[0].message)\n"
        "import jax.numpy as jnp\n"
        "from jax.experimental import pallas as pl\n"
        "def k(x_ref, o_ref): o_ref[...] = x_ref[...] + 1\n"
        "x = jnp.zeros((8, 128), jnp.float32)\n"
        "y = pl.pallas_call(k, out_shape=x, interpret=mosaic_rt.InterpretParams())(x)\n"
        "print('RAN', float(y.sum()))\n"
    )
    out = _run(code)
    assert "WARNINGS 1" in out.stdout, out.stderr
    assert "was tested with jax 0.10.2 .. " in out.stdout and "found jax 0.99.0, which is newer" in out.stdout
    assert "RAN 1024.0" in out.stdout, out.stderr


def test_import_fails_cleanly_with_a_too_old_jax():
    code = (
        "import jax; jax.__version__ = '0.10.1'\n"
        "try:\n    import mosaic_rt\nexcept ImportError as e:\n    print('IMPORT-ERROR', e)\n"
    )
    out = _run(code)
    assert "IMPORT-ERROR mosaic_rt supports jax >= 0.10.2; found jax 0.10.1" in out.stdout, out.stderr


def test_a_moved_internal_at_import_is_a_jax_version_error():
    # A newer jax that dropped a module jax_internals imports.
    code = (
        "import sys, warnings; warnings.simplefilter('ignore')\n"
        "import jax; jax.__version__ = '0.99.0'\n"
        "sys.modules['jax._src.pallas.mosaic.pipeline'] = None\n"
        "try:\n    import mosaic_rt\n"
        "except ImportError as e:\n"
        "    print('TYPE', type(e).__name__); print('MESSAGE', e)\n"
    )
    out = _run(code)
    assert "TYPE JaxVersionError" in out.stdout, out.stderr
    assert "cannot use jax 0.99.0: a JAX internal it relies on has moved" in out.stdout
    assert "jax._src.pallas.mosaic.pipeline" in out.stdout and "Tested with jax 0.10.2 .. " in out.stdout


def test_a_moved_internal_inside_a_kernel_is_a_jax_version_error(monkeypatch):
    # A jax object the interpreter reads lost an attribute (jax 0.12.1 did
    # this to BlockMapping.transformed_block_aval; faked here by deleting a
    # property of GridMapping): the kernel fails with a JaxVersionError
    # naming the jax version, not an AttributeError.
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    monkeypatch.delattr(jx.GridMapping, "slice_block_ops")  # a property the interpreter reads

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    x = jnp.zeros((8, 128), jnp.float32)
    f = pl.pallas_call(kernel, out_shape=x, interpret=mosaic_rt.InterpretParams())
    with pytest.raises(mosaic_rt.JaxVersionError, match=rf"cannot use jax {re.escape(jax.__version__)}") as info:
        jax.block_until_ready(f(x))
    assert "slice_block_ops" in str(info.value) and "Tested with jax 0.10.2 .. " in str(info.value)


def test_an_attribute_error_of_our_own_passes_through():
    # Only a lookup on a jax object is a moved internal.
    class Ours:
        pass

    with pytest.raises(AttributeError):
        with jax_version.internals_guard():
            Ours().missing  # noqa: B018


def test_jax_internals_are_imported_in_one_place():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "jax_internals.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(from|import)\s+jax\._src\b", line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert not offenders, "JAX internals outside jax_internals.py:\n" + "\n".join(offenders)


def test_memory_space_codes_have_one_source_and_agree_with_stock():
    import mosaic_rt._native as native
    from mosaic_rt import jax_internals as jx
    from mosaic_rt.ffi import ops as ffi_ops
    from mosaic_rt.memory_spaces import code as space_code

    assert ffi_ops.MEMORY_SPACES is native.MEMORY_SPACES
    assert ffi_ops.SEMAPHORE_KINDS == native.SEMAPHORE_KINDS == ("regular", "dma", "barrier")
    # Every TPU memory space of the installed jax maps to the code stock gives it.
    stock = jx.stock_interpreter.TPU_MEMORY_SPACE_IDXS
    for space in jx.MemorySpace:
        if space in stock and isinstance(space.value, str):
            assert space_code(space) == stock[space], space
    assert space_code(jx.AnyMemorySpace) == native.MEMORY_SPACES["hbm"]


def test_block_memory_space_reads_either_block_mapping_layout():
    # jax <= 0.12.0.1: BlockMapping.transformed_block_aval (the block after
    # its transforms); 0.12.1 dropped the transforms and kept block_aval.
    import types

    old = types.SimpleNamespace(
        transformed_block_aval=types.SimpleNamespace(memory_space="vmem"),
        block_aval=types.SimpleNamespace(memory_space="any"),
    )
    new = types.SimpleNamespace(block_aval=types.SimpleNamespace(memory_space="smem"))
    assert jx.block_memory_space(old) == "vmem"
    assert jx.block_memory_space(new) == "smem"
