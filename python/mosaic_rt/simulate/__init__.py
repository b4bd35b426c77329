"""A simulated TPU host: the process looks like a host of one TPU chip to
the code under test, and every Pallas TPU kernel runs in TPU interpret mode
on mosaic_rt, whatever ``interpret=`` it passes.

    with mosaic_rt.simulate_tpu("v6e"):        # a block
        ...
    mosaic_rt.set_simulated_tpu("v7x")          # the rest of the process
    pytest --mosaic-rt=v7x                      # a test run (see docs/pytest-flag.md)

Kernels (`routing`): ``pallas_call`` / ``core_map`` / ``pl.kernel`` lowered
for the CPU with ``interpret=False`` or ``True`` run with the run's
``params`` (``mosaic_rt.InterpretParams`` fields); one passing its own
``pltpu.InterpretParams(...)`` keeps the fields its author chose, on
mosaic_rt; a ``mosaic_rt.InterpretParams`` is used as it is.
``interpreter="stock"`` runs them all in jax's own TPU interpret mode
instead (the same chip: a side-by-side comparison).

The host (`gates`, each listed in `GATES` and switched off by naming it in
``disable``): `pltpu.get_tpu_info()`, the devices' ``device_kind`` /
``num_cores`` / ``coords`` / ``core_on_chip``, jax's ``jax_test_dut`` flag,
jtu's chip helpers, `jax.default_backend()` answering ``"tpu"``, and the
host's number of CPU devices. jax still compiles and runs for the CPU
(``jax.devices()[0].platform == "cpu"``).

The gates are process-wide while a simulation is on (they patch jax's
device class and module attributes): a `simulate_tpu` block simulates for
every thread until it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings

from mosaic_rt import jax_internals as jx
from mosaic_rt.simulate import gates as _gates
from mosaic_rt.simulate import routing
from mosaic_rt.simulate.chips import (
    CHIPS,
    DEFAULT_CHIP,
    GATE_HELP,
    GATES,
    INTERPRETERS,
    Chip,
    normalize_chip,
    normalize_interpreter,
    parse_gates,
    parse_params,
)

__all__ = [
    "CHIPS",
    "DEFAULT_CHIP",
    "GATES",
    "GATE_HELP",
    "INTERPRETERS",
    "Chip",
    "Simulation",
    "simulate_tpu",
    "set_simulated_tpu",
    "simulated_tpu",
]


@dataclasses.dataclass(frozen=True)
class Simulation:
    """The simulation in force.

    Attributes:
      chip: the simulated chip (`Chip`).
      params: the ``InterpretParams`` fields kernels get (a dict).
      interpreter: "mosaic_rt" or "stock".
      gates: the gates that are on.
      notes: what did not go as asked (e.g. fewer CPU devices than the host
        has, because jax was initialised before); also issued as warnings.
    """

    chip: Chip
    params: dict
    interpreter: str
    gates: frozenset
    notes: tuple


_lock = threading.RLock()
_current: tuple | None = None  # (Simulation, undo functions, interpret-mode setting before)


def simulated_tpu() -> Simulation | None:
    """The simulation in force, or None."""
    return _current[0] if _current else None


def _prepare(chip, params, interpreter, disable) -> tuple[Simulation, routing.Setting]:
    name = normalize_chip(DEFAULT_CHIP if chip is None else chip, "simulate_tpu(chip=)")
    fields = parse_params(params, "simulate_tpu(params=)")
    interpreter = normalize_interpreter(interpreter, "simulate_tpu(interpreter=)")
    off = parse_gates(disable, "simulate_tpu(disable=)")
    cores = CHIPS[name].cores_per_device
    if cores > 1:
        # A megacore chip splits a kernel's "parallel" grid dimensions
        # between its TensorCores, each with its own VMEM / SMEM (scalar
        # prefetch included): kernels written for it (paged attention's
        # megacore modes) need both cores. The user's value wins.
        fields.setdefault("num_cores_or_threads", cores)
    setting = routing.Setting(name, interpreter, tuple(sorted(fields.items(), key=lambda kv: kv[0])))
    try:
        hash(setting)
    except TypeError:
        raise TypeError(f"simulate_tpu(params=): every value must be hashable, got {fields!r}.") from None
    routing.check_params(setting)  # a bad field fails here, with the params' own message
    on = frozenset(g for g in GATES if g not in off)
    return Simulation(CHIPS[name], fields, interpreter, on, ()), setting


def _check_platform() -> None:
    """jax must run on the CPU: a simulation is a CPU process."""
    import jax

    platforms = jax.config.jax_platforms
    if jx.backends_are_initialized():
        if jax.default_backend() != "cpu" and "cpu" not in (platforms or "cpu").split(","):
            raise RuntimeError(
                f"simulate_tpu: jax runs on {jax.default_backend()!r}; a simulated TPU host needs jax on the CPU "
                "(JAX_PLATFORMS=cpu before jax starts)."
            )
        return
    if not platforms:
        # jax would probe for accelerators (libtpu, when installed, looks for
        # a TPU): a simulated host is a CPU process.
        jax.config.update("jax_platforms", "cpu")
    elif "cpu" not in platforms.split(","):
        raise RuntimeError(
            f"simulate_tpu: JAX_PLATFORMS={platforms!r} leaves out the CPU; a simulated TPU host runs on it."
        )


def _apply(simulation: Simulation, setting: routing.Setting) -> tuple:
    _check_platform()
    notes: list[str] = []
    undos = []
    try:
        for gate in GATES:
            if gate in simulation.gates:
                undos.append(_gates.GATE_FUNCTIONS[gate](simulation.chip, notes))
        before = jx.interpret_mode_setting.get_global()
        jx.interpret_mode_setting.set_global(setting)
        routing.activate(setting)
    except BaseException:
        for undo in reversed(undos):
            undo()
        raise
    simulation = dataclasses.replace(simulation, notes=tuple(notes))
    for note in notes:
        warnings.warn(f"mosaic_rt.simulate_tpu({simulation.chip.name!r}): {note}", UserWarning, stacklevel=4)
    return (simulation, undos, before)


def _remove(current) -> None:
    _simulation, undos, before = current
    routing.activate(None)
    if isinstance(jx.interpret_mode_setting.get_global(), routing.Setting):
        jx.interpret_mode_setting.set_global(before)
    for undo in reversed(undos):
        undo()


def set_simulated_tpu(chip: str | None = DEFAULT_CHIP, *, params=None, interpreter="mosaic_rt", disable=()):
    """Process-wide: simulates ``chip`` from now on (``None``: ends the
    simulation). Returns the `Simulation` in force (or None).

    Args:
      chip: one of `CHIPS` ("v4", "v5e", "v5p", "v6e", "v7x"; "tpu7x" for
        "v7x"); default `DEFAULT_CHIP`.
      params: ``InterpretParams`` fields for kernels that pass
        ``interpret=False`` / ``True`` (a dict, or ``"KEY=VALUE ..."`` text).
      interpreter: "mosaic_rt" (default) or "stock" (jax's own TPU
        interpret mode, e.g. to compare).
      disable: gates to leave off (names of `GATES`, or "all").
    """
    global _current
    with _lock:
        prepared = None if chip is None else _prepare(chip, params, interpreter, disable)
        if _current is not None:
            _remove(_current)
            _current = None
        if prepared is not None:
            _current = _apply(*prepared)
        return simulated_tpu()


@contextlib.contextmanager
def simulate_tpu(chip: str = DEFAULT_CHIP, *, params=None, interpreter="mosaic_rt", disable=()):
    """Simulates ``chip`` while the block runs (see `set_simulated_tpu` for
    the arguments); the simulation in force before comes back afterwards.
    Errors a kernel raises natively reach the block as their own Python
    type (`mosaic_rt.native_errors`). Yields the `Simulation`."""
    from mosaic_rt.ffi import native_errors

    global _current
    with _lock:
        prepared = _prepare(chip, params, interpreter, disable)
        outer = _current
        if outer is not None:
            _remove(outer)
        try:
            _current = _apply(*prepared)
        except BaseException:
            _current = _apply(*_restore_args(outer)) if outer is not None else None
            raise
        mine = _current
    try:
        with native_errors():
            yield mine[0]
    finally:
        with _lock:
            _remove(mine)
            _current = _apply(*_restore_args(outer)) if outer is not None else None


def _restore_args(current) -> tuple:
    simulation = current[0]
    setting = routing.Setting(
        simulation.chip.name, simulation.interpreter, tuple(sorted(simulation.params.items(), key=lambda kv: kv[0]))
    )
    return dataclasses.replace(simulation, notes=()), setting
