"""TPU generations the compile check knows, and the process-wide setting.

No jax and no libtpu here: `InterpretParams.__post_init__` validates its
``tpu_target`` / ``tpu_check`` fields with these functions.
"""

from __future__ import annotations

import os
import threading

ENV_TARGET = "MOSAIC_RT_TPU_TARGET"
ENV_MODE = "MOSAIC_RT_TPU_CHECK"

# Generation -> (topology string prefix, number of topology dimensions).
# The names are the ones libtpu accepts in `get_topology_desc("v5e:2x2")`.
GENERATIONS: dict[str, tuple[str, int]] = {
    "v4": ("v4", 3),
    "v5e": ("v5e", 2),
    "v5p": ("v5p", 3),
    "v6e": ("v6e", 2),
    "v7x": ("tpu7x", 3),
}
ALIASES = {"tpu7x": "v7x", "v5litepod": "v5e", "v6litepod": "v6e"}
MODES = ("raise", "warn")

_lock = threading.Lock()
# Set by the pytest plugin (--mosaic-rt-tpu-target / ini) or
# `set_default_target`; None: read the environment.
_default_target: tuple[str, ...] | None = None
_default_mode: str | None = None


def _known() -> str:
    return ", ".join(repr(g) for g in GENERATIONS) + " (alias 'tpu7x' for 'v7x')"


def normalize_generation(name, what: str = "tpu_target") -> str:
    """The canonical name of one generation ("TPU7x" -> "v7x")."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: a TPU generation is a string, got {name!r}.")
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in GENERATIONS:
        raise ValueError(f"{what}: unknown TPU generation {name!r}; known: {_known()}.")
    return key


def normalize_target(target, what: str = "tpu_target") -> tuple[str, ...] | None:
    """``None`` (not set), or the generations of ``target`` (a string, a
    comma-separated string or a tuple/list of strings), canonical, in order,
    without repeats. ``()`` / ``""`` mean: no check."""
    if target is None:
        return None
    if isinstance(target, str):
        names = [piece for piece in target.replace(" ", ",").split(",") if piece]
    elif isinstance(target, (tuple, list)):
        names = list(target)
    else:
        raise TypeError(f"{what} must be a TPU generation (e.g. 'v5e'), a tuple of them or None, got {target!r}.")
    out: list[str] = []
    for name in names:
        gen = normalize_generation(name, what)
        if gen not in out:
            out.append(gen)
    return tuple(out)


def validate_target(target, what: str = "tpu_target") -> None:
    normalize_target(target, what)


def validate_mode(mode, what: str = "tpu_check") -> None:
    if mode is not None and mode not in MODES:
        raise ValueError(f"{what} must be 'raise', 'warn' or None, got {mode!r}.")


def set_default_target(target, mode: str | None = None) -> None:
    """Sets the process-wide check for kernels whose ``tpu_target`` is
    ``None`` (what pytest's ``--mosaic-rt-tpu-target`` does); ``None``
    restores the environment's (``MOSAIC_RT_TPU_TARGET``)."""
    global _default_target, _default_mode
    targets = normalize_target(target, "set_default_target")
    validate_mode(mode, "set_default_target(mode=)")
    with _lock:
        _default_target = targets
        _default_mode = mode
        _answer_tpu_info()


def _answer_tpu_info() -> None:
    """`get_tpu_info()` on CPU answers for the process's first target."""
    from mosaic_rt.tpu_check import tpu_info

    try:
        target = process_target()
    except ValueError:  # a bad MOSAIC_RT_TPU_TARGET: the first kernel says so
        target = ()
    tpu_info.answer_on_cpu(target[0] if target else None)


def answer_tpu_info_from_environment() -> None:
    """At import: with ``MOSAIC_RT_TPU_TARGET`` set, `get_tpu_info()` on CPU
    answers for its first generation (nothing is loaded otherwise)."""
    if os.environ.get(ENV_TARGET, "").strip():
        with _lock:
            _answer_tpu_info()


def process_target() -> tuple[str, ...]:
    """The generations every kernel with ``tpu_target=None`` is checked for."""
    if _default_target is not None:
        return _default_target
    return normalize_target(os.environ.get(ENV_TARGET, ""), ENV_TARGET) or ()


def process_mode() -> str:
    if _default_mode is not None:
        return _default_mode
    mode = os.environ.get(ENV_MODE, "").strip().lower() or "raise"
    validate_mode(mode, ENV_MODE)
    return mode


def resolve(params) -> tuple[tuple[str, ...], str]:
    """``(generations, mode)`` for a kernel lowered with ``params``."""
    targets = normalize_target(getattr(params, "tpu_target", None))
    if targets is None:
        targets = process_target()
    mode = getattr(params, "tpu_check", None) or process_mode()
    return targets, mode
