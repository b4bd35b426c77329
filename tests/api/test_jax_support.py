"""The supported jax range and the one module that touches JAX internals."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from mosaic_rt import jax_internals as jx

PACKAGE = pathlib.Path(jx.__file__).parent


@pytest.mark.parametrize("version", ["0.10.1", "0.9.2", "0.13.0", "0.13.0.dev20270101", "1.0.0"])
def test_unsupported_jax_is_one_clear_import_error(version):
    with pytest.raises(ImportError, match=rf"jax >= 0\.10\.2 and < 0\.13; found jax {re.escape(version)}"):
        jx._check_supported(version)


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.11.2", "0.12.0", "0.12.0.1", "0.12.9rc1"])
def test_supported_jax_passes(version):
    jx._check_supported(version)


def test_import_fails_cleanly_with_an_unsupported_jax():
    code = (
        "import jax; jax.__version__ = '0.13.1'\n"
        "try:\n    import mosaic_rt\nexcept ImportError as e:\n    print('IMPORT-ERROR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "IMPORT-ERROR mosaic_rt supports jax >= 0.10.2 and < 0.13; found jax 0.13.1" in out.stdout, out.stderr


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
