"""mosaic_rt: run unmodified Pallas TPU kernels on CPU at native speed."""

from mosaic_rt import jax_version as _jax_version

# First: jax_internals checks the jax version (an ImportError below the
# supported range, an UntestedJaxWarning above the tested one), and a JAX
# internal that moved becomes a JaxVersionError naming both versions.
with _jax_version.internals_guard():
    from mosaic_rt import jax_internals as _jax_internals  # noqa: F401
    from mosaic_rt import races, stages, timeline, tpu
from mosaic_rt.errors import (
    DeadlockError,
    JaxVersionError,
    KernelAborted,
    MisuseWarning,
    MosaicRuntimeError,
    MultiProcessError,
    RaceError,
    RaceWarning,
    SemaphoreLeakError,
    SemaphoreLeakWarning,
    TpuCompileError,
    TpuCompileWarning,
    UninitializedReadError,
    UntestedJaxWarning,
    WaitTimeout,
)
from mosaic_rt.export import export_disabled_checks
from mosaic_rt.ffi import native_errors
from mosaic_rt.ffi.reports import deliver as deliver_reports
from mosaic_rt.interpret.launch import seam as _seam
from mosaic_rt.interpret.launch.mode import force_interpret_mode, set_interpret_mode
from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.runtime import BufferInfo, Leak, Runtime
from mosaic_rt.simulate import set_simulated_tpu, simulate_tpu, simulated_tpu

# Route pallas_call(interpret=mosaic_rt.InterpretParams()) to our interpreter
# (stock InterpretParams keep the stock path).
with _jax_version.internals_guard():
    _seam.install()
# MOSAIC_RT_TPU_TARGET: pltpu.get_tpu_info() on CPU answers for its chip.
from mosaic_rt.tpu_check import targets as _tpu_targets

_tpu_targets.answer_tpu_info_from_environment()

from mosaic_rt._version import __version__  # noqa: E402

__all__ = [
    "__version__",
    "tpu",
    "races",
    "stages",
    "timeline",
    "InterpretParams",
    "force_interpret_mode",
    "set_interpret_mode",
    "native_errors",
    "simulate_tpu",
    "set_simulated_tpu",
    "simulated_tpu",
    "deliver_reports",
    "export_disabled_checks",
    "BufferInfo",
    "Leak",
    "Runtime",
    "DeadlockError",
    "JaxVersionError",
    "KernelAborted",
    "MosaicRuntimeError",
    "MultiProcessError",
    "SemaphoreLeakError",
    "UninitializedReadError",
    "WaitTimeout",
    "RaceError",
    "RaceWarning",
    "SemaphoreLeakWarning",
    "MisuseWarning",
    "TpuCompileError",
    "TpuCompileWarning",
    "UntestedJaxWarning",
]
