"""mosaic_rt's pytest plugins (registered by installing mosaic_rt).

A package of their own, beside `mosaic_rt`, so that loading them costs
nothing: pytest loads every installed plugin at the start of every run, and
importing anything under `mosaic_rt` runs its `__init__`, which imports jax
(seconds) -- before the suite's conftest could set `JAX_PLATFORMS` or
`XLA_FLAGS`. These modules import neither jax nor mosaic_rt until an option
of theirs is in use (or the suite itself imported mosaic_rt):

* `reports_and_cache`: ``--mosaic-rt-warnings``, ``--mosaic-rt-cache``, and
  kernel reports delivered inside the test that ran the kernel;
* `tpu_check`: ``--mosaic-rt-tpu-target`` / ``--mosaic-rt-tpu-check``;
* `simulate`: ``--mosaic-rt[=CHIP]``, the simulated TPU host.

`pure_module` loads one of mosaic_rt's stdlib-only table modules (the chip
table, ...) by path, without running the package's `__init__`.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def pure_module(relative: str, name: str):
    """The module at ``mosaic_rt/<relative>`` (a stdlib-only module: the
    chip table) loaded on its own as ``mosaic_rt_pytest.<name>``, or the
    package's own copy when the suite already imported it."""
    dotted = "mosaic_rt." + relative.removesuffix(".py").replace("/", ".")
    if dotted in sys.modules:
        return sys.modules[dotted]
    key = f"{__name__}.{name}"
    if key in sys.modules:
        return sys.modules[key]
    package = importlib.util.find_spec("mosaic_rt")  # finds, does not import
    if package is None or not package.submodule_search_locations:
        raise ImportError("mosaic_rt_pytest: the mosaic_rt package is not installed")
    path = os.path.join(list(package.submodule_search_locations)[0], relative)
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module
