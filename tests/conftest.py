"""Shared pytest setup.

Simulated CPU devices must be configured before jax initialises its backend,
so this runs first: one process gets 16 CPU devices; tests that want 2 or 8
use a mesh over a prefix of them. 64-device runs use a subprocess.
"""

import os

_DEVICES = 16
_flag = f"--xla_force_host_platform_device_count={_DEVICES}"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The TPU compile check caches its answers on disk across processes: keep the
# suite's own (per run, so no test depends on a previous run's answers).
if "MOSAIC_RT_TPU_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["MOSAIC_RT_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="mosaic_rt_tpu_check_")
    atexit.register(shutil.rmtree, os.environ["MOSAIC_RT_TPU_CACHE_DIR"], True)
