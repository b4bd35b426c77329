"""The one place where mosaic_rt hooks into jax.

pallas_call's lowering (jax 0.10.2 .. 0.12: `jax/_src/pallas/pallas_call.py`,
`_pallas_call_lowering`) sends every `interpret` value that is an instance of
`pltpu.InterpretParams` to stock's `interpret_pallas_call`, looked up as a
module attribute at lowering time (`jax_internals.PALLAS_CALL_SEAM`).
`force_tpu_interpret_mode` and `pl.core_map` (which becomes a pallas_call)
go through the same lowering. So we install one dispatcher on
that attribute: it takes over for `mosaic_rt.InterpretParams` and calls the
original function for everything else, leaving stock behaviour untouched.

pallas_call's lowering rule itself is wrapped the same way
(`_install_lowering`): for our params it goes straight to that dispatcher,
skipping the rule's import of the GPU interpreter (once per process, and
costly: benches/PERFORMANCE.md, "The launch seam and tracing").

A simulated run (`mosaic_rt.simulate`: ``pytest --mosaic-rt``,
`mosaic_rt.simulate_tpu`) routes every TPU kernel lowered for the CPU,
whatever its ``interpret=``: both lowering rules ask
`mosaic_rt.simulate.routing.route` first (mpmd_map's too: `pl.kernel`, and
`core_map` on jax 0.12, lower through it), and so does the dispatcher, which
jax's own rule reaches with a stock ``pltpu.InterpretParams``.

A third, equally narrow hook (`jax_internals.INTERPRET_EFFECTS_SEAM`)
gives stock interpret mode ordered IO effects, because its per-op Python
callbacks share one global memory and kernels must not overlap. Our kernels
each get their own native runtime and talk to Python at most once per launch,
so for `mosaic_rt.InterpretParams` a pallas_call has the effects it would
have on a real TPU (none); that keeps jit on its fast C++ dispatch path
(what that saves a launch: benches/PERFORMANCE.md, "The launch seam and
tracing").
"""

from __future__ import annotations

import functools
import threading

from mosaic_rt import jax_internals, jax_version, stages
from mosaic_rt.interpret.launch import processes
from mosaic_rt.interpret.params import InterpretParams
from mosaic_rt.simulate import routing

_lock = threading.Lock()
# The params of the mpmd_map (`pl.kernel`; `core_map` on jax 0.12) whose CPU
# fallback is lowering, per thread: the pallas_call that fallback makes
# reaches `_ours`, but the TPU lowers the mpmd_map by a rule of its own, and
# the compile check must compile what the TPU compiles.
_mpmd_origin = threading.local()
_stock_module, _ATTR = jax_internals.PALLAS_CALL_SEAM
_effects_module, _EFFECTS_ATTR = jax_internals.INTERPRET_EFFECTS_SEAM
_export_module, _EXPORT_ATTR = jax_internals.EXPORT_CHECK_SEAM
_MARK = "_mosaic_rt_dispatcher"


def install() -> None:
    """Installs the dispatcher (idempotent, thread-safe)."""
    with _lock:
        current = getattr(_stock_module, _ATTR)
        if getattr(current, _MARK, False):
            return
        stock_impl = current

        @functools.wraps(stock_impl)
        def dispatch(*args, interpret_params, **kwargs):
            if routing.active() is not None:
                interpret_params = routing.route(interpret_params, kwargs.get("compiler_params"), ("cpu",))
            with stages.interpreting():  # ours and stock's alike
                if isinstance(interpret_params, InterpretParams):
                    return _ours(args, kwargs, interpret_params)
                return stock_impl(*args, interpret_params=interpret_params, **kwargs)

        setattr(dispatch, _MARK, True)
        setattr(_stock_module, _ATTR, dispatch)
        _install_effects()
        _install_lowering()
        _install_mpmd_lowering()
        _install_export_check()


def _ours(args, kwargs, interpret_params: InterpretParams):
    """A pallas_call lowered by our interpreter. With a tpu_target (or
    MOSAIC_RT_TPU_TARGET) the same pallas_call is also compiled for each TPU
    generation (once per distinct kernel; on a worker thread meanwhile with
    MOSAIC_RT_TPU_CHECK_OVERLAP=1), whose verdict comes first: a kernel
    that does not compile fails as such, whatever the interpreter made of
    it."""
    from mosaic_rt.ffi import reports
    from mosaic_rt.interpret.launch.kernel import interpret_pallas_call
    from mosaic_rt.tpu_check import check as tpu_check

    reports.deliver_in_background()  # outside pytest (see reports)
    with jax_version.internals_guard():
        if kwargs.get("debug"):
            from mosaic_rt.interpret.launch.debug_print import print_tpu_lowering

            print_tpu_lowering(args, kwargs)
        mpmd_params, _mpmd_origin.params = getattr(_mpmd_origin, "params", None), None
        check = tpu_check.start_check(args, kwargs, interpret_params, mpmd_params=mpmd_params)
        try:
            return interpret_pallas_call(*args, interpret_params=interpret_params, **kwargs)
        finally:
            if check is not None:
                check.finish()


def _install_lowering() -> None:
    """pallas_call's lowering rule, taking `mosaic_rt.InterpretParams`
    straight to the dispatcher: jax's rule first imports the GPU
    interpreter (paid by the first kernel of every process) only to test
    the params' type. Everything else, and any kernel jax's rule would
    reject, goes to jax's rule unchanged."""
    stock_rule, inline = jax_internals.pallas_call_lowering()
    if getattr(stock_rule, _MARK, False):
        return

    def lowering(ctx, *in_nodes, interpret, **params):
        if routing.active() is not None:
            interpret = routing.route(interpret, params.get("compiler_params"), ctx.module_context.platforms)
        if isinstance(interpret, InterpretParams) and not params["jaxpr"].constvars:
            impl = functools.partial(getattr(_stock_module, _ATTR), interpret_params=interpret, **params)
            with processes.lowering_in(ctx):
                return jax_internals.lower_fun(impl, multiple_results=True)(ctx, *in_nodes)
        if not isinstance(interpret, InterpretParams):
            # Not ours: jax's rule exactly as without mosaic_rt (any mesh,
            # abstract ones included, any platform).
            return stock_rule(ctx, *in_nodes, interpret=interpret, **params)
        with processes.lowering_in(ctx):
            return stock_rule(ctx, *in_nodes, interpret=interpret, **params)

    setattr(lowering, _MARK, True)
    jax_internals.set_pallas_call_lowering(lowering, inline)


def _install_mpmd_lowering() -> None:
    """mpmd_map's lowering rule (`pl.kernel`; `core_map` on jax 0.12), taking
    a simulated run's kernels to TPU interpret mode: on CPU it calls
    pallas_call's lowering function directly, past the rule above. For our
    kernels it notes the mpmd_map's params for the compile check (`_ours`)."""
    found = jax_internals.mpmd_map_lowering()
    if found is None or getattr(found[0], _MARK, False):
        return
    stock_rule, inline = found

    def lowering(ctx, *in_nodes, **params):
        if routing.active() is not None and "interpret" in params:
            params["interpret"] = routing.route(
                params["interpret"], params.get("compiler_params"), ctx.module_context.platforms
            )
        if not isinstance(params.get("interpret"), InterpretParams):
            return stock_rule(ctx, *in_nodes, **params)
        _mpmd_origin.params = params
        try:
            return stock_rule(ctx, *in_nodes, **params)
        finally:
            _mpmd_origin.params = None

    setattr(lowering, _MARK, True)
    jax_internals.set_mpmd_map_lowering(lowering, inline)


def _install_effects() -> None:
    stock_effects = getattr(_effects_module, _EFFECTS_ATTR)
    if getattr(stock_effects, _MARK, False):
        return

    @functools.wraps(stock_effects)
    def interpret_effects(interpret):
        if routing.active() is not None:
            interpret = routing.effects_interpret(interpret)
        if isinstance(interpret, InterpretParams):
            return jax_internals.no_effects
        return stock_effects(interpret)

    setattr(interpret_effects, _MARK, True)
    setattr(_effects_module, _EFFECTS_ATTR, interpret_effects)


def _install_export_check() -> None:
    """jax.export's module check, preceded by ours: a program with our
    kernels is refused with a message saying what they are (see
    `mosaic_rt.export`); everything else is jax's check unchanged."""
    stock_check = getattr(_export_module, _EXPORT_ATTR)
    if getattr(stock_check, _MARK, False):
        return

    @functools.wraps(stock_check)
    def check_module(mod, *args, disabled_checks, **kwargs):
        from mosaic_rt import export

        export.check_module(mod, disabled_checks)
        return stock_check(mod, *args, disabled_checks=disabled_checks, **kwargs)

    setattr(check_module, _MARK, True)
    setattr(_export_module, _EXPORT_ATTR, check_module)
