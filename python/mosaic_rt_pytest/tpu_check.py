"""pytest plugin of the TPU compile check (registered by installing mosaic_rt;
imports mosaic_rt only when one of its options is set).

* ``--mosaic-rt-tpu-target v5e,v6e`` (or ini ``mosaic_rt_tpu_target =
  v5e,v6e``): every mosaic_rt kernel of the run whose
  ``InterpretParams(tpu_target=None)`` is also compiled for these TPU
  generations (as ``MOSAIC_RT_TPU_TARGET``; see :mod:`mosaic_rt.tpu_check`),
  so an existing suite is checked without editing its tests.
* ``--mosaic-rt-tpu-check warn`` (ini ``mosaic_rt_tpu_check``): a kernel that
  does not compile issues ``mosaic_rt.TpuCompileWarning`` instead of failing
  with ``mosaic_rt.TpuCompileError``.
"""

from __future__ import annotations

import sys

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("mosaic_rt")
    group.addoption(
        "--mosaic-rt-tpu-target",
        default=None,
        metavar="GENERATIONS",
        help="mosaic_rt: also compile every kernel for these TPU generations with the real "
        "TPU compiler, on CPU (comma-separated: v4, v5e, v5p, v6e, v7x; needs libtpu)",
    )
    group.addoption(
        "--mosaic-rt-tpu-check",
        default=None,
        help="mosaic_rt: what a kernel that does not compile for a --mosaic-rt-tpu-target "
        "does: raise (TpuCompileError, default) or warn (TpuCompileWarning)",
    )
    parser.addini(
        "mosaic_rt_tpu_target", default="", help="mosaic_rt: as --mosaic-rt-tpu-target (unset: MOSAIC_RT_TPU_TARGET)"
    )
    parser.addini("mosaic_rt_tpu_check", default="", help="mosaic_rt: raise or warn, as --mosaic-rt-tpu-check")


def pytest_configure(config):
    target = config.getoption("mosaic_rt_tpu_target", None)
    if target is None:
        target = str(config.getini("mosaic_rt_tpu_target")).strip() or None
    mode = config.getoption("mosaic_rt_tpu_check", None)
    if mode is None:
        mode = str(config.getini("mosaic_rt_tpu_check")).strip().lower() or None
    if target is None and mode is None:
        return  # not in use: mosaic_rt stays unimported
    from mosaic_rt.tpu_check import targets

    try:
        targets.validate_mode(mode, "mosaic_rt_tpu_check")
        normalized = targets.normalize_target(target, "--mosaic-rt-tpu-target")
    except (TypeError, ValueError) as e:
        raise pytest.UsageError(str(e)) from None
    if normalized is not None or mode is not None:
        if normalized is None:  # a mode alone: the environment's target
            normalized = targets.process_target()
        targets.set_default_target(normalized, mode)


def pytest_unconfigure(config):
    targets = sys.modules.get("mosaic_rt.tpu_check.targets")
    if targets is not None:
        targets.set_default_target(None)


def pytest_report_header(config):
    targets = sys.modules.get("mosaic_rt.tpu_check.targets")
    target = None if targets is None else targets._default_target
    if target:
        return f"mosaic_rt TPU compile check: {', '.join(target)} ({targets.process_mode()})"
    return None
