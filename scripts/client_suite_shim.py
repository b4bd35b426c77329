"""pytest plugin for scripts/client_suite.py (load with ``-p client_suite_shim``,
scripts/ on sys.path): a third-party kernel test suite, unmodified, run on a
simulated TPU chip in TPU interpret mode -- stock's or mosaic_rt's.

Both backends get the same simulated chip, from ``CLIENT_SUITE_CHIP``
(``v5e``, ``v6e``, ``v7x``, ...):

* jax's test flag ``jax_test_dut`` is ``"tpu"``, and jax's test helpers
  ``jtu.get_tpu_version`` / ``jtu.is_device_tpu`` answer for that chip (on
  CPU they read the device kind "cpu"), so the suite's "Expect TPUv6+" gates
  open as on that chip;
* ``pltpu.get_tpu_info()`` on CPU answers for the chip (an entry for device
  kind "cpu" in jax's TPU info registry), so kernels size blocks as there.

* the CPU devices get the topology attributes of that chip's devices,
  ``coords`` (a 2 x N grid of chips, in id order) and ``core_on_chip``
  (v7x: two devices per chip), so code that orders devices physically
  (``sorted(jax.devices(), key=lambda d: d.coords)``) runs.

* the CPU devices' ``device_kind`` is the chip's (``"TPU v6 lite"``,
  ``"TPU7x"``, ...): kernels pick tuned block sizes and code paths by
  reading it directly (tpu-inference's ragged paged attention v3 raises
  "Unsupported tpu_version=-1" on "cpu"). Devices of other platforms (the
  TPU compile check's) keep their own.

* ``jax.default_backend()`` (the public function; jax itself calls its
  private one) answers ``"tpu"``: tests gate kernels on it ("Pallas TPU
  kernel needs TPU hardware", deepseek_v4/mhc_test.py), and the kernels
  they then call run in interpret mode like every other.

What stays CPU: the platform (``jax.devices()[0].platform == "cpu"``), so
jax compiles and runs everything for the CPU.

Then every pallas_call / core_map of the process runs in TPU interpret mode:
``CLIENT_SUITE_BACKEND=stock`` sets ``pltpu.set_tpu_interpret_mode(
pltpu.InterpretParams())``; ``mosaic_rt`` sets
``mosaic_rt.set_interpret_mode(mosaic_rt.InterpretParams())`` and runs each
test inside ``mosaic_rt.native_errors()`` (a kernel's error arrives as its own
Python type, as under ``mosaic_rt.force_interpret_mode``). A process-wide
setting wins over any ``interpret=`` a kernel passes, so kernels called with
``interpret=False`` (as on a TPU) are interpreted too.
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest

# Generation -> (jtu version number, variant, device kind, cores per chip).
CHIPS = {
    "v4": (4, "", "TPU v4", 1),
    "v5e": (5, "e", "TPU v5 lite", 1),
    "v5p": (5, "p", "TPU v5", 2),
    "v6e": (6, "e", "TPU v6 lite", 1),
    "v7x": (7, "x", "TPU7x", 1),
}
BACKENDS = ("stock", "mosaic_rt")


def _chip() -> str:
    chip = os.environ.get("CLIENT_SUITE_CHIP", "v6e")
    if chip not in CHIPS:
        raise pytest.UsageError(f"CLIENT_SUITE_CHIP={chip!r}: expected one of {', '.join(CHIPS)}")
    return chip


def _backend() -> str:
    backend = os.environ.get("CLIENT_SUITE_BACKEND", "")
    if backend not in BACKENDS:
        raise pytest.UsageError(f"CLIENT_SUITE_BACKEND={backend!r}: expected one of {', '.join(BACKENDS)}")
    return backend


def _simulate_chip(chip: str) -> None:
    import jax
    from jax._src import test_util as jtu

    try:
        from jax._src import tpu_info
    except ImportError:  # jax < 0.11
        from jax._src.pallas.mosaic import tpu_info

    version, variant, kind, cores = CHIPS[chip]
    jax.config.update("jax_test_dut", "tpu")

    def get_tpu_version() -> int:
        return version

    def is_device_tpu(version_=None, variant_="", **kwargs):
        want_version = kwargs.get("version", version_)
        want_variant = kwargs.get("variant", variant_)
        if want_version is None:
            return True
        return want_version == version and (not want_variant or want_variant == variant)

    jtu.get_tpu_version = get_tpu_version
    jtu.is_device_tpu = is_device_tpu

    # Topology of the chip's devices on the CPU device class (this process
    # has no other devices of that class to confuse).
    per_chip = 2 if chip == "v7x" else 1
    device_class = type(jax.devices("cpu")[0])
    if not hasattr(device_class, "coords"):
        device_class.coords = property(lambda d: ((d.id // per_chip) % 2, (d.id // per_chip) // 2, 0))
    if not hasattr(device_class, "core_on_chip"):
        device_class.core_on_chip = property(lambda d: d.id % per_chip)

    native_kind = device_class.__dict__.get("device_kind")
    if isinstance(native_kind, property) and not getattr(native_kind.fget, "_client_suite", False):

        def device_kind(d, _native=native_kind):
            return kind if d.platform == "cpu" else _native.__get__(d)

        device_kind._client_suite = True
        device_class.device_kind = property(device_kind)
    if not hasattr(jax.devices("cpu")[0], "num_cores"):
        # What jax's TPU info reads of a TPU device (TPU devices answer
        # through the class's __getattr__, which this falls back to).
        def num_cores(d):
            if d.platform != "cpu":
                raise AttributeError("num_cores")
            return cores

        device_class.num_cores = property(num_cores)

    if not getattr(jax.default_backend, "_client_suite", False):
        real_default_backend = jax.default_backend

        def default_backend():
            backend = real_default_backend()
            return "tpu" if backend == "cpu" else backend

        default_backend._client_suite = True
        jax.default_backend = default_backend

    chip_version = tpu_info.chip_version_from_device_kind(kind)
    tpu_info.registry["cpu"] = lambda: tpu_info.get_tpu_info_for_chip(chip_version, cores)
    clear = getattr(tpu_info.get_tpu_info, "cache_clear", None)
    if clear is not None:
        clear()


def _params() -> dict:
    """InterpretParams fields for both backends, from ``CLIENT_SUITE_PARAMS``
    (a JSON object, e.g. ``{"buffer_bounds": "logical"}``)."""
    text = os.environ.get("CLIENT_SUITE_PARAMS", "")
    if not text:
        return {}
    params = json.loads(text)
    if not isinstance(params, dict):
        raise pytest.UsageError(f"CLIENT_SUITE_PARAMS={text!r}: expected a JSON object")
    return params


def _force_interpret_mode(backend: str) -> None:
    if backend == "stock":
        from jax.experimental.pallas import tpu as pltpu

        pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(**_params()))
    else:
        import mosaic_rt

        mosaic_rt.set_interpret_mode(mosaic_rt.InterpretParams(**_params()))


def pytest_configure(config):
    config._client_suite = {"chip": _chip(), "backend": _backend()}
    _simulate_chip(config._client_suite["chip"])
    _force_interpret_mode(config._client_suite["backend"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.config._client_suite["backend"] == "mosaic_rt":
        import mosaic_rt

        errors = mosaic_rt.native_errors()
    else:
        errors = contextlib.nullcontext()
    with errors:
        return (yield)


def pytest_report_header(config):
    s = config._client_suite
    return f"client_suite_shim: backend {s['backend']}, simulated chip {s['chip']}"
