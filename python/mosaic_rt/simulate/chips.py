"""The TPU chips a run can simulate, and the text forms of the simulation's
settings (pytest options, ini keys, environment variables).

No jax here: the pytest plugin validates its options with these functions
before anything imports jax.
"""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class Chip:
    """What code under test can ask of one TPU generation.

    Attributes:
      name: our name ("v6e"), as in ``--mosaic-rt=v6e``.
      version, variant: what ``jtu.get_tpu_version()`` / ``is_device_tpu(version,
        variant)`` answer (6, "e").
      device_kind: a device's ``device_kind`` on that chip ("TPU v6 lite").
      cores_per_device: a device's ``num_cores``, the TensorCores one jax device
        drives (what jax's TPU info reads; 1 where each core is a device).
      devices_per_chip: jax devices per chip (v7x: each TensorCore is a device).
      host_devices: the devices of one host of that chip (its CPU devices here).
      accelerator_type: a TPU VM's ``TPU_ACCELERATOR_TYPE`` for that host.
    """

    name: str
    version: int
    variant: str
    device_kind: str
    cores_per_device: int
    devices_per_chip: int
    host_devices: int
    accelerator_type: str


# Host sizes: the largest single-host slice of each generation (v4-8 and
# v5p-8: 4 chips; v5e-8, v6e-8: 8 chips; v7x: 4 chips of 2 devices).
CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip("v4", 4, "", "TPU v4", 1, 1, 4, "v4-8"),
        Chip("v5e", 5, "e", "TPU v5 lite", 1, 1, 8, "v5litepod-8"),
        Chip("v5p", 5, "p", "TPU v5", 2, 1, 4, "v5p-8"),
        Chip("v6e", 6, "e", "TPU v6 lite", 1, 1, 8, "v6e-8"),
        Chip("v7x", 7, "x", "TPU7x", 1, 2, 8, "tpu7x-8"),
    )
}
ALIASES = {"tpu7x": "v7x", "v5litepod": "v5e", "v6litepod": "v6e"}
# v6e: the newest generation with one TensorCore per device and 128 MiB of
# VMEM, so kernels tuned for v5e / v6e fit, and "at least v6" gates open;
# v7x (two devices per chip, 64 MiB of VMEM, SparseCores) only when asked.
DEFAULT_CHIP = "v6e"

# What the simulated process shows of the chip, each one separately
# switchable (`GATE_HELP` says what each does).
GATE_HELP = {
    "tpu_info": "pltpu.get_tpu_info() answers for the chip (an entry for device kind 'cpu' in jax's TPU info registry)",
    "device_kind": "the CPU devices' device_kind is the chip's, and num_cores its cores per device",
    "topology": "the CPU devices have the chip's coords (a 2 x N grid of chips in id order) and core_on_chip",
    "test_dut": "jax's jax_test_dut flag is 'tpu' (jtu.device_under_test(), test_device_matches(['tpu']), "
    "jtu's TPU dtypes and tolerances)",
    "jtu": "jtu.get_tpu_version / is_device_tpu / is_device_tpu_at_least answer for the chip",
    "default_backend": "jax.default_backend() answers 'tpu' (jax itself keeps compiling for the CPU)",
    "devices": "jax gets the chip host's number of CPU devices (unless XLA_FLAGS or JAX_NUM_CPU_DEVICES says)",
    "tpu_env": "a TPU VM's environment where unset: TPU_ACCELERATOR_TYPE (e.g. v6e-8), TPU_NAME, TPU_WORKER_ID, "
    "which tools read before they ask the cloud metadata server",
}
GATES = tuple(GATE_HELP)
INTERPRETERS = ("mosaic_rt", "stock")

ENV_CHIP = "MOSAIC_RT_CHIP"
ENV_PARAMS = "MOSAIC_RT_PARAMS"
ENV_DISABLE = "MOSAIC_RT_DISABLE"
ENV_INTERPRETER = "MOSAIC_RT_INTERPRETER"


def chip_choices() -> str:
    return ", ".join(CHIPS) + " (alias tpu7x for v7x)"


def normalize_chip(name, what: str = "chip") -> str:
    """Our name of a chip ("TPU7x" -> "v7x"); a ValueError naming the choices."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: a TPU chip is a string such as 'v6e', got {name!r}.")
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in CHIPS:
        raise ValueError(f"{what}: unknown TPU chip {name!r}; choose one of {chip_choices()}.")
    return key


def parse_gates(text, what: str = "disable") -> frozenset[str]:
    """Gate names from ``"default_backend,devices"`` (commas or spaces; ``all``:
    every gate) or a sequence of names."""
    if text is None:
        return frozenset()
    names = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    out = set()
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what}: a gate is a string, got {name!r}.")
        key = name.strip().lower()
        if key == "all":
            out.update(GATES)
        elif key in GATE_HELP:
            out.add(key)
        else:
            raise ValueError(f"{what}: unknown gate {name!r}; gates: {', '.join(GATES)} (or all).")
    return frozenset(out)


def normalize_interpreter(name, what: str = "interpreter") -> str:
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in INTERPRETERS:
        raise ValueError(f"{what} must be one of {', '.join(INTERPRETERS)}, got {name!r}.")
    return key


def _value(text: str):
    """A params value: JSON where it parses (true, 3, 0.5, null, "x"), Python's
    True / False / None, else the text itself."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_params(text, what: str = "params") -> dict:
    """InterpretParams fields from ``"dma_execution_mode=on_wait detect_races=true"``
    (``KEY=VALUE`` pairs separated by spaces or commas) or a mapping."""
    if text is None:
        return {}
    if isinstance(text, dict):
        return dict(text)
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a string of KEY=VALUE pairs or a dict, got {text!r}.")
    out: dict = {}
    for item in text.replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"{what}: {item!r} is not KEY=VALUE (e.g. dma_execution_mode=on_wait detect_races=true).")
        if key in out:
            raise ValueError(f"{what}: {key} is given twice.")
        out[key] = _value(value)
    return out
