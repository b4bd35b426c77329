"""pytest plugin for scripts/jax_suite.py --backend mosaic_rt (load with
``-p jax_suite_shim``, scripts/ on sys.path, beside mosaic_rt's own
``--mosaic-rt --mosaic-rt-disable=all``): JAX's own interpret-mode test
files, unmodified, run on mosaic_rt.

The flag does the work: every kernel those tests run -- with the
``pltpu.InterpretParams(...)`` each test chose, also under
``pltpu.force_tpu_interpret_mode`` -- runs on mosaic_rt with the fields its
test chose (all gates off: these files want the plain CPU host of one or
eight devices). What is left here is bookkeeping of the harness:

* in every collected test module, ``mosaic_interpret`` (stock's
  ``interpret_pallas_call`` module, which the tests read for stock's race
  detector) becomes a proxy whose ``races`` is ``mosaic_rt.races``
  (``races_found``); every other read and every write (e.g. the tests'
  patching of ``store``) goes to the real module;
* a guard: kernels that reached stock's interpreter while tests ran (the
  flag missed one if that is not 0), printed in the terminal summary and,
  with ``JAX_SUITE_SHIM_STATS=path``, written as JSON.
"""

from __future__ import annotations

import functools
import json
import os
import types

import pytest

_stats = {"kernels": 0, "kernels_on_stock": 0, "modules_patched": []}
_in_test = [False]


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


def _install_guard():
    """Counts kernels in TPU interpret mode (the seam's dispatcher sees
    every one) and those of them mosaic_rt's interpreter ran."""
    import mosaic_rt.interpret.launch.kernel as ours
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as stock_ipc

    dispatcher = stock_ipc.interpret_pallas_call
    interpreter = ours.interpret_pallas_call
    ran_ours = [0]

    @functools.wraps(interpreter)
    def counted_ours(*args, **kwargs):
        ran_ours[0] += 1
        return interpreter(*args, **kwargs)

    @functools.wraps(dispatcher)
    def counted(*args, **kwargs):
        before = ran_ours[0]
        try:
            return dispatcher(*args, **kwargs)
        finally:
            if _in_test[0]:
                _stats["kernels"] += 1
                _stats["kernels_on_stock"] += ran_ours[0] == before

    ours.interpret_pallas_call = counted_ours
    stock_ipc.interpret_pallas_call = counted
    return stock_ipc


def pytest_configure(config):
    import mosaic_rt

    stock_ipc = _install_guard()
    config._jax_suite_proxies = {id(stock_ipc): _Proxy(stock_ipc, {"races": mosaic_rt.races})}


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
        f"kernels in TPU interpret mode during tests: {_stats['kernels']}, on stock's interpreter: "
        f"{_stats['kernels_on_stock']}"
    )


def pytest_unconfigure(config):
    path = os.environ.get("JAX_SUITE_SHIM_STATS")
    if path:
        with open(path, "w") as f:
            json.dump(_stats, f, indent=1)
