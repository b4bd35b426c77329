"""Kernel routing of a simulated run: every Pallas TPU kernel lowered for
the CPU runs in TPU interpret mode -- mosaic_rt's, or stock's when the run
asks for it -- whatever ``interpret=`` it passed.

jax resolves ``interpret`` at trace time as ``<pltpu's interpret-mode
setting> or interpret`` (pallas_call, core_map, pl.kernel) and decides at
lowering time what to do with it. A run's `Setting` sits in that setting
and is *falsy*: jax keeps the kernel's own value (False, True, a stock
``pltpu.InterpretParams`` with the fields its author chose), and the
setting still keys jax's caches, so a function jitted before the
simulation started is traced again inside it. The seam
(`mosaic_rt.interpret.launch.seam`) then calls `route` where it lowers a
kernel for the CPU.
"""

from __future__ import annotations

import dataclasses
import threading

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.params import InterpretParams

_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Setting:
    """One simulated run, as jax's interpret-mode setting holds it (falsy:
    see the module doc). ``params`` are ``(field, value)`` pairs."""

    chip: str
    interpreter: str = "mosaic_rt"
    params: tuple = ()

    def __bool__(self) -> bool:
        return False


_active: Setting | None = None


def active() -> Setting | None:
    return _active


def activate(setting: Setting | None) -> None:
    """Routes kernels for ``setting`` (None: stops routing)."""
    global _active
    with _lock:
        _active = setting


def _is_tpu_kernel(compiler_params) -> bool:
    """A kernel for TPUs: no compiler params, or Mosaic TPU's (a Triton or
    Mosaic GPU kernel with ``interpret=True`` keeps jax's HLO interpreter)."""
    if compiler_params is None:
        return True
    if isinstance(compiler_params, dict):  # the old {"mosaic": {...}} spelling
        return bool({"mosaic", "mosaic_tpu"} & set(compiler_params))
    return isinstance(compiler_params, jx.CompilerParams)


def _stock_defaults() -> dict:
    out = {}
    for f in dataclasses.fields(jx.StockInterpretParams):
        if f.init and f.default is not dataclasses.MISSING:
            out[f.name] = f.default
    return out


def _fields(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params) if f.init}


def params_for(interpret, setting: Setting):
    """The interpret params a kernel passing ``interpret`` runs with.

    ``False`` / ``True``: the run's params (``mosaic_rt_params``) over the
    interpreter's defaults. A ``pltpu.InterpretParams`` the kernel chose:
    its fields, each of those left at stock's default replaced by the run's
    value where the run sets one. A ``mosaic_rt.InterpretParams``: kept (or
    carried over to stock's, same rule, when the run asked for stock)."""
    run = dict(setting.params)
    stock_run = setting.interpreter == "stock"
    target = jx.StockInterpretParams if stock_run else InterpretParams
    if isinstance(interpret, InterpretParams) and not stock_run:
        return interpret
    if isinstance(interpret, jx.StockInterpretParams):
        if type(interpret) is target:
            base = _fields(interpret)
        else:
            base = {k: v for k, v in _fields(interpret).items() if k in _field_names(target)}
        defaults = _stock_defaults()
        for key, value in run.items():
            if key not in base or (key in defaults and base[key] == defaults[key]):
                base[key] = value
        return target(**base)
    return target(**run)


def _field_names(cls) -> set:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def route(interpret, compiler_params, platforms):
    """What a kernel lowered for ``platforms`` runs with under the active
    setting: ``interpret`` itself when nothing is simulated, the lowering is
    not for the CPU alone (the TPU compile check lowers for TPUs), or the
    kernel is not a TPU kernel."""
    setting = _active
    if setting is None or not platforms or any(p != "cpu" for p in platforms):
        return interpret
    if not _is_tpu_kernel(compiler_params):
        return interpret
    return params_for(interpret, setting)


def effects_interpret(interpret):
    """The interpret value jax's trace-time effects should see: a kernel
    that will be routed has the effects of where it is routed to (none for
    mosaic_rt; stock's ordered callbacks for stock)."""
    setting = _active
    if setting is None or not (interpret is None or isinstance(interpret, (bool, jx.StockInterpretParams))):
        return interpret  # e.g. GPU interpret params: not ours to route
    if setting.interpreter == "stock":
        return jx.StockInterpretParams() if not isinstance(interpret, jx.StockInterpretParams) else interpret
    return InterpretParams() if not isinstance(interpret, InterpretParams) else interpret


def check_params(setting: Setting):
    """The params a ``False`` kernel gets (raises the params' own TypeError /
    ValueError for a bad field)."""
    return params_for(False, setting)
