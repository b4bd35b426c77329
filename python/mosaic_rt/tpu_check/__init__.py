"""Compile every kernel that runs under mosaic_rt for real TPU generations,
on CPU ("passes here, compiles there").

With ``InterpretParams(tpu_target="v5e")`` (or ``("v5e", "v6e")``), the
environment variable ``MOSAIC_RT_TPU_TARGET=v5e,v6e`` or pytest's
``--mosaic-rt-tpu-target v5e,v6e`` / ini ``mosaic_rt_tpu_target``, each
kernel lowered under mosaic_rt is also compiled for each named generation by
the Pallas TPU lowering and the Mosaic / XLA:TPU compiler of libtpu, without
a TPU (deviceless ahead-of-time compilation). A kernel that does not compile
fails with `mosaic_rt.TpuCompileError` naming the kernel, its source line,
the generation and the compiler's message (``tpu_check="warn"`` /
``MOSAIC_RT_TPU_CHECK=warn``: a `mosaic_rt.TpuCompileWarning` instead).

Needs the libtpu the installed jax pins (`install_command()`; e.g.
``pip install "libtpu==0.0.50.*"`` for jax 0.12.0.1, ``"libtpu==0.0.42.*"``
for 0.10.2, or ``pip install "mosaic_rt[tpu]"``); importing mosaic_rt never
loads it. Keep ``JAX_PLATFORMS=cpu`` (jax itself probes for a TPU when
libtpu is installed and no platform is set).

Cost: results are cached per kernel and generation in the process (`stats`,
`clear_cache`) and on disk for every process (``MOSAIC_RT_TPU_CACHE_DIR``,
default ``~/.cache/mosaic_rt/tpu_check``, ``off`` to disable; see
`disk_cache`), keyed by the kernel's fingerprint and the jax, libtpu and
mosaic_rt versions. The first check of a process pays libtpu's start and
first compile, each further small kernel a compile of its own, a kernel
seen before (in this process or, through the disk cache, in another)
nothing, and a process whose every answer is on disk never starts libtpu;
calls of a compiled program never check. ``python -m mosaic_rt bench
--filter "tpu check"`` measures it; the figures are in
benches/PERFORMANCE.md ("TPU compile check", "Cost of a TPU compile
check").

`report()` lists what was checked: per kernel and generation whether it
compiled, the seconds in the compiler and what the compiler reports about
memory (``compiled.memory_analysis()``: argument / output / temp / code
bytes; VMEM / SMEM use is reported only when it overflows, in the error).

A tiling error (``(4, 128)`` blocks of a ``(16, 128)`` array, v5e)::

    mosaic_rt.errors.TpuCompileError: kernel 'add_one' (add_one at test.py:9)
    does not compile for TPU v5e (jax 0.12.0.1, libtpu 0.0.50.1); the Pallas
    TPU lowering says (ValueError):
      The Pallas TPU lowering currently requires that the last two dimensions
      of your block shape are divisible by 8 and 128 respectively, or be equal
      to the respective dimensions of the overall array. Block spec for
      args[0] in pallas_call add_one at test.py:9 has block shape
      (Blocked(block_size=4), Blocked(block_size=128)), array shape (16, 128),
      ...

A VMEM overflow (32 MiB of scratch on v4's 16 MiB)::

    mosaic_rt.errors.TpuCompileError: kernel 'kernel' (kernel at test.py:20)
    does not compile for TPU v4 (jax 0.12.0.1, libtpu 0.0.50.1); the Mosaic /
    XLA:TPU compiler says (JaxRuntimeError):
      RESOURCE_EXHAUSTED: Allocation (size=33554432) would exceed memory
      (size=16777216) :: #allocation3 [shape = 'f32[65536,128]{1,0:T(8,128)}',
      space=vmem, size = 0x2000000, scoped, tag = 'scratch operand'] :: kernel.1

(blocks over the scoped VMEM limit: "Ran out of memory in memory space vmem.
Used 128.00M of 127.94M vmem ...", or "Scoped allocation with size 128.00M
and limit 16.00M exceeded scoped vmem limit").

Multi-device kernels (under ``shard_map``) are compiled on a topology with as
many TPU devices, with the same mesh axes, so remote DMAs and device ids
lower as on a pod; each device sees the kernel's operand shapes.

Uses: `mosaic_rt.jax_internals`, `mosaic_rt.errors`, `mosaic_rt._version`;
never the interpreter (which calls it) nor the native library.
"""

from __future__ import annotations

from mosaic_rt.tpu_check.targets import (
    ENV_MODE,
    ENV_TARGET,
    GENERATIONS,
    process_mode,
    process_target,
    set_default_target,
)


def __getattr__(name):
    # The check itself (jax, libtpu) loads only when used.
    if name in ("check_kernel", "clear_cache", "install_command", "topology", "topology_name", "Outcome", "report"):
        from mosaic_rt.tpu_check import check

        return getattr(check, name)
    if name == "stats":
        from mosaic_rt.tpu_check import check

        return check.stats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ENV_MODE",
    "ENV_TARGET",
    "GENERATIONS",
    "process_mode",
    "process_target",
    "set_default_target",
    "check_kernel",
    "clear_cache",
    "install_command",
    "report",
    "stats",
]
