"""jax.export of programs with mosaic_rt kernels.

A kernel run by mosaic_rt lowers to custom calls into mosaic_rt's runtime
(``mosaic_rt.ffi.TARGETS``), registered in the process that imported
mosaic_rt; their operands and attributes are mosaic_rt's private wire
format, which may change with any release. jax.export refuses custom calls
without a compatibility guarantee; its message lists raw MLIR. The seam
(``mosaic_rt.interpret.launch.seam``) runs :func:`check_module` first, so an
export of such a program fails saying what it is and what to do instead.
Exporting for a TPU (no mosaic_rt interpret mode) exports the TPU's own,
stable kernel call.
"""

from __future__ import annotations

import re

import jax

from mosaic_rt import ffi

_CALL = re.compile(r'custom_call\s*@(mosaic_rt_\w+)|call_target_name\s*=\s*"(mosaic_rt_\w+)"')


def export_disabled_checks() -> list:
    """``jax.export.DisabledSafetyCheck``s that let ``jax.export.export``
    serialize a program with mosaic_rt kernels. The exported program runs
    only in a process that imported the same mosaic_rt version (for tests
    of an export round trip on CPU, not for deployment)::

        jax.export.export(jax.jit(f), disabled_checks=mosaic_rt.export_disabled_checks())(x)
    """
    return [jax.export.DisabledSafetyCheck.custom_call(t) for t in ffi.TARGETS]


def check_module(module, disabled_checks) -> None:
    """Raises ``ValueError`` if ``module`` (a lowered MLIR module about to
    be exported) calls mosaic_rt's runtime and ``disabled_checks`` does not
    allow each such target."""
    allowed = {c.is_custom_call() for c in disabled_checks}
    found = sorted({a or b for a, b in _CALL.findall(str(module))} - allowed)
    if found:
        raise ValueError(
            "jax.export cannot serialize this program: it runs Pallas kernels in"
            f" mosaic_rt's TPU interpret mode, lowered to calls into mosaic_rt's"
            f" runtime ({', '.join(found)}) in the process that imported"
            " mosaic_rt, in a format with no compatibility guarantee across"
            " mosaic_rt or jax versions. To export for a TPU, lower the kernel"
            " without mosaic_rt's interpret mode (outside force_interpret_mode /"
            " pytest --mosaic-rt, no interpret=mosaic_rt.InterpretParams()). To"
            " export anyway, for a round trip in a process with the same"
            " mosaic_rt: jax.export.export(fn,"
            " disabled_checks=mosaic_rt.export_disabled_checks())."
        )
