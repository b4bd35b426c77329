"""The gates of a simulated chip: what the process shows code under test of
a TPU host (`chips.GATE_HELP`), each applied on its own and undone by the
function it returns. jax keeps its CPU platform: every gate answers
questions, none changes what jax compiles for.
"""

from __future__ import annotations

import functools
import os
import re
import sys

import jax

from mosaic_rt import jax_internals as jx
from mosaic_rt.simulate.chips import Chip
from mosaic_rt.tpu_check import tpu_info

# Each gate: chip, notes (a list to append what the user should know) ->
# its undo function.


def tpu_info_gate(chip: Chip, notes: list):
    tpu_info.simulate(chip.name)
    return lambda: tpu_info.simulate(None)


def _set_class_attr(cls, name: str, value):
    """Sets ``cls.name`` and returns the function that puts back what was
    there (or removes it)."""
    missing = object()
    before = cls.__dict__.get(name, missing)
    setattr(cls, name, value)

    def undo():
        if before is missing:
            delattr(cls, name)
        else:
            setattr(cls, name, before)

    return undo


def _cpu_only(name: str, value):
    """A property answering ``value(device)`` for CPU devices; other devices
    (the TPU compile check's topology) raise AttributeError, so the class's
    ``__getattr__`` answers for them as before."""

    def get(device):
        if device.platform != "cpu":
            raise AttributeError(name)
        return value(device)

    get.__name__ = name
    return property(get)


def device_kind_gate(chip: Chip, notes: list):
    cls = jx.device_class()
    native = cls.__dict__["device_kind"]

    def device_kind(device):
        return chip.device_kind if device.platform == "cpu" else native.__get__(device)

    undo_kind = _set_class_attr(cls, "device_kind", property(device_kind))
    # What jax's TPU info reads of a device besides its kind.
    undo_cores = _set_class_attr(cls, "num_cores", _cpu_only("num_cores", lambda d: chip.cores_per_device))
    undo_mesh_cores = _abstract_mesh_cores(chip)

    def undo():
        undo_mesh_cores()
        undo_cores()
        undo_kind()

    return undo


def _abstract_mesh_cores(chip: Chip):
    """Inside `shard_map` jax reads a device's kind and cores from the
    mesh's abstract device, whose cores jax fills in only for TPU / GPU
    platforms: a CPU device's were None, so ``pltpu.TensorCoreMesh()``
    made there had ``num_cores=None`` (``lax.axis_size`` of its axis
    raised a TypeError). A CPU abstract device answers the chip's cores,
    as the CPU device itself does -- when read, so that abstract meshes
    jax made (and interned) before the simulation answer too."""
    cls = jx.abstract_device_class()
    slot = cls.__dict__["num_cores"]  # the dataclass field's slot

    def get(device):
        cores = slot.__get__(device, cls)
        return chip.cores_per_device if cores is None and device.platform == "cpu" else cores

    def set_(device, value):
        slot.__set__(device, value)

    return _set_class_attr(cls, "num_cores", property(get, set_))


def topology_gate(chip: Chip, notes: list):
    cls = jx.device_class()
    per_chip = chip.devices_per_chip

    def coords(device):
        index = device.id // per_chip
        return (index % 2, index // 2, 0)

    undo_coords = _set_class_attr(cls, "coords", _cpu_only("coords", coords))
    undo_core = _set_class_attr(cls, "core_on_chip", _cpu_only("core_on_chip", lambda d: d.id % per_chip))

    def undo():
        undo_core()
        undo_coords()

    return undo


def _jtu(gate: str, notes: list):
    # None where jax's test helpers do not import (they need absl-py): then
    # the code under test cannot ask them either.
    return jx.test_util()


def test_dut_gate(chip: Chip, notes: list):
    jtu = _jtu("test_dut", notes)
    if jtu is None:
        return lambda: None
    before = jx.test_dut(jtu)
    jax.config.update("jax_test_dut", "tpu")
    return lambda: jax.config.update("jax_test_dut", before)


def jtu_names(chip: Chip) -> frozenset[str]:
    """The ``v{version}{variant}`` names jtu's ``is_device_tpu`` accepts on
    that chip: jtu matches them against the device kind, "v5e" / "v6e" as
    "v5 lite" / "v6 lite", "v5p" as a kind ending in "v5", "v7x" as
    "TPU7x", anything else as a substring (so "v7" does not match "TPU7x")."""
    kind = chip.device_kind
    special = {
        "v5e": "v5 lite" in kind,
        "v6e": "v6 lite" in kind,
        "v5p": kind.endswith("v5"),
        "v7x": "TPU7x" in kind,
    }
    names = {name for name, ok in special.items() if ok}
    for variant in ("", "e", "p", "x", "i"):
        name = f"v{chip.version}{variant}"
        if name not in special and name in kind:
            names.add(name)
    return frozenset(names)


def jtu_gate(chip: Chip, notes: list):
    jtu = _jtu("jtu", notes)
    if jtu is None:
        return lambda: None
    names = jtu_names(chip)
    match = re.match(r"TPU[^\d]*(\d+)", chip.device_kind)
    chip_version = int(match.group(1)) if match else chip.version

    # jtu's own signatures: suites call them with keywords (version=7).
    def get_tpu_version() -> int:
        return chip_version

    def is_device_tpu_at_least(version: int) -> bool:
        return chip_version >= version

    def is_device_tpu(version: int | None = None, variant: str = "") -> bool:
        return version is None or f"v{version}{variant}" in names

    undos = [
        _set_module_attr(jtu, name, fn)
        for name, fn in (
            ("get_tpu_version", get_tpu_version),
            ("is_device_tpu_at_least", is_device_tpu_at_least),
            ("is_device_tpu", is_device_tpu),
        )
    ]
    undos += _late_capture(jtu)
    return lambda: [undo() for undo in reversed(undos)]


def _late_capture(jtu) -> list:
    """jtu's ``capture_stdout`` / ``capture_stderr`` bind ``sys.stdout`` /
    ``sys.stderr`` when jtu is imported. The simulation imports jtu when
    pytest configures, before pytest captures output, so they would capture
    the terminal's descriptor while ``print`` writes to pytest's: they look
    the stream up when called instead (what an import under pytest binds)."""
    capture = getattr(jtu, "_capture_output", None)
    if capture is None:
        return []
    undos = []
    for name, stream in (("capture_stdout", "stdout"), ("capture_stderr", "stderr")):
        if hasattr(jtu, name):
            undos.append(_set_module_attr(jtu, name, functools.partial(_capture_current, capture, stream)))
    return undos


def _capture_current(capture, stream: str):
    return capture(getattr(sys, stream))


def _set_module_attr(module, name: str, value):
    before = getattr(module, name)
    setattr(module, name, value)
    return lambda: setattr(module, name, before)


def default_backend_gate(chip: Chip, notes: list):
    real = jax.default_backend

    def default_backend() -> str:
        backend = real()
        return "tpu" if backend == "cpu" else backend

    default_backend.__doc__ = real.__doc__
    return _set_module_attr(jax, "default_backend", default_backend)


_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def devices_gate(chip: Chip, notes: list):
    want = chip.host_devices
    flag = _COUNT_FLAG.search(os.environ.get("XLA_FLAGS", ""))
    setting = jx.num_cpu_devices_setting()
    if flag or setting >= 0:  # the user's choice stands
        return lambda: None
    if jx.backends_are_initialized():
        have = len(jax.devices("cpu"))
        if have < want:
            notes.append(
                f"devices: jax was initialised with {have} CPU device(s) before the simulation started; a "
                f"{chip.name} host has {want}. Start the simulation before anything runs jax (e.g. pytest "
                f"--mosaic-rt rather than a conftest that computes at import), or set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={want}."
            )
        return lambda: None
    jax.config.update("jax_num_cpu_devices", want)

    def undo():
        if not jx.backends_are_initialized():
            jax.config.update("jax_num_cpu_devices", -1)

    return undo


# A TPU VM's variables (tools such as tpu-inference read them before they
# ask the cloud metadata server, which a simulated host must not reach).
def _tpu_env(chip: Chip) -> dict:
    return {"TPU_ACCELERATOR_TYPE": chip.accelerator_type, "TPU_NAME": "mosaic-rt-simulated", "TPU_WORKER_ID": "0"}


def tpu_env_gate(chip: Chip, notes: list):
    added = {}
    for name, value in _tpu_env(chip).items():
        if name not in os.environ:
            os.environ[name] = added[name] = value

    def undo():
        for name, value in added.items():
            if os.environ.get(name) == value:
                del os.environ[name]

    return undo


GATE_FUNCTIONS = {
    "tpu_info": tpu_info_gate,
    "device_kind": device_kind_gate,
    "topology": topology_gate,
    "test_dut": test_dut_gate,
    "jtu": jtu_gate,
    "default_backend": default_backend_gate,
    "devices": devices_gate,
    "tpu_env": tpu_env_gate,
}
