"""pytest plugin for scripts/jax_suite.py --backend mosaic_rt (load with
``-p jax_suite_shim``, scripts/ on sys.path): JAX's own interpret-mode test
files, unmodified, run on mosaic_rt.

In every collected test module (not globally, so jax and mosaic_rt internals
keep seeing the real stock objects) it rebinds

* ``pltpu`` (``jax.experimental.pallas.tpu``) to a proxy module where
  ``InterpretParams`` is ``mosaic_rt.InterpretParams`` (same arguments),
  ``force_tpu_interpret_mode(params)`` is ``mosaic_rt.force_interpret_mode``
  with the stock params' fields carried over, and
  ``reset_tpu_interpret_mode_state()`` also resets stock's state (mosaic_rt
  keeps no state across launches to reset); every other attribute is the
  real one;
* ``mosaic_interpret`` (stock's ``interpret_pallas_call`` module) to a proxy
  whose ``races`` is ``mosaic_rt.races`` (``races_found``); every other read
  and every write (e.g. the tests' patching of ``store``) goes to the real
  module.

As a guard it counts stock ``pltpu.InterpretParams`` objects constructed
while tests run (the shim missed a construction site if that is not 0) and
prints the count in the terminal summary and, with
``JAX_SUITE_SHIM_STATS=path``, writes it as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types

import pytest

_stats = {"stock_params_constructed": 0, "stock_params_sites": {}, "modules_patched": []}
_in_test = [False]


def _to_ours(params):
    import mosaic_rt

    if params is None or isinstance(params, mosaic_rt.InterpretParams):
        return params if params is not None else mosaic_rt.InterpretParams()
    fields = {f.name: getattr(params, f.name) for f in dataclasses.fields(params) if f.init}
    return mosaic_rt.InterpretParams(**fields)


class _Proxy(types.ModuleType):
    """A module whose attributes are the real module's except ``overrides``;
    writes go to the real module."""

    def __init__(self, real, overrides):
        super().__init__(real.__name__, getattr(real, "__doc__", None))
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_overrides", dict(overrides))

    def __getattribute__(self, name):
        if name in ("_real", "_overrides", "__class__", "__dict__"):
            return object.__getattribute__(self, name)
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name, value):
        setattr(object.__getattribute__(self, "_real"), name, value)

    def __delattr__(self, name):
        delattr(object.__getattribute__(self, "_real"), name)

    def __dir__(self):
        return dir(object.__getattribute__(self, "_real"))


def _make_proxies():
    import mosaic_rt
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as stock_ipc
    from jax.experimental.pallas import tpu as pltpu

    def force_tpu_interpret_mode(params=None):
        return mosaic_rt.force_interpret_mode(_to_ours(params))

    def reset_tpu_interpret_mode_state():
        pltpu.reset_tpu_interpret_mode_state()

    pltpu_proxy = _Proxy(
        pltpu,
        {
            "InterpretParams": mosaic_rt.InterpretParams,
            "force_tpu_interpret_mode": force_tpu_interpret_mode,
            "reset_tpu_interpret_mode_state": reset_tpu_interpret_mode_state,
        },
    )
    ipc_overrides = {"races": mosaic_rt.races}
    for name in ("InterpretParams", "force_tpu_interpret_mode", "reset_tpu_interpret_mode_state"):
        if hasattr(stock_ipc, name):
            ipc_overrides[name] = getattr(pltpu_proxy, name)
    ipc_proxy = _Proxy(stock_ipc, ipc_overrides)
    return {id(pltpu): pltpu_proxy, id(stock_ipc): ipc_proxy}


def _install_guard():
    from jax._src.pallas.mosaic.interpret import params as stock_params_mod

    stock_cls = stock_params_mod.InterpretParams
    original = stock_cls.__post_init__

    def __post_init__(self, *args, **kwargs):
        if type(self) is stock_cls and _in_test[0]:
            import traceback

            _stats["stock_params_constructed"] += 1
            frame = traceback.extract_stack(limit=3)[0]
            site = f"{os.path.basename(frame.filename)}:{frame.lineno}"
            _stats["stock_params_sites"][site] = _stats["stock_params_sites"].get(site, 0) + 1
        return original(self, *args, **kwargs)

    stock_cls.__post_init__ = __post_init__


def pytest_configure(config):
    import mosaic_rt  # noqa: F401  (installs mosaic_rt's seam)

    config._jax_suite_proxies = _make_proxies()
    _install_guard()


def pytest_collection_modifyitems(session, config, items):
    proxies = config._jax_suite_proxies
    seen = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        patched = []
        for name, value in list(vars(module).items()):
            proxy = proxies.get(id(value))
            if proxy is not None:
                setattr(module, name, proxy)
                patched.append(name)
        _stats["modules_patched"].append({"module": module.__name__, "names": patched})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _in_test[0] = True
    try:
        return (yield)
    finally:
        _in_test[0] = False


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    tr.write_sep("-", "jax_suite_shim (mosaic_rt backend)")
    for entry in _stats["modules_patched"]:
        tr.write_line(f"patched {entry['module']}: {', '.join(entry['names']) or '(nothing)'}")
    tr.write_line(
        f"stock pltpu.InterpretParams constructed during tests: "
        f"{_stats['stock_params_constructed']} {_stats['stock_params_sites'] or ''}"
    )


def pytest_unconfigure(config):
    path = os.environ.get("JAX_SUITE_SHIM_STATS")
    if path:
        with open(path, "w") as f:
            json.dump(_stats, f, indent=1)
