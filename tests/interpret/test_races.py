"""Race detection (`InterpretParams(detect_races=True)`) on Pallas kernels:
`mosaic_rt.races.races_found` must agree with stock's `races.races_found`
for the same kernel, and outputs must not change with detection on or off.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Callable

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from core_mesh import core_mesh
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import stock_interpreter as stock_ipc

ROWS = 8
MODES = ("on_wait", "eager", "tpu")
# Stock has no "tpu" mode: its races are compared with stock's eager ones
# (race detection follows happens-before, not when bytes move).
STOCK_MODE = {"on_wait": "on_wait", "eager": "eager", "tpu": "eager"}


def _any():
    return pl.BlockSpec(memory_space=pl.ANY)


def _call(kernel, scratch, *, x_any=True, out_any=False, grid=()):
    def fn(interpret, x):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), x.dtype),
            in_specs=[_any() if x_any else pl.BlockSpec((ROWS, 128), lambda *i: (0, 0))],
            out_specs=_any() if out_any else pl.BlockSpec((ROWS, 128), lambda *i: (0, 0)),
            scratch_shapes=scratch,
            grid=grid,
            interpret=interpret,
        )(x)

    return fn


# ------------------------------------------------------- single device


def _read_after_wait(x_ref, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_ref, buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] + 1.0


def _read_before_wait(x_ref, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_ref, buf, sem)
    copy.start()
    early = buf[0:1, :]  # races with the DMA's write of buf
    copy.wait()
    o_ref[...] = buf[...] + jnp.where(jnp.isnan(early), 0.0, 0.0)


def _overwrite_source_before_wait(x_ref, o_ref, buf, sem):
    buf[...] = x_ref[...]
    copy = pltpu.make_async_copy(buf, o_ref, sem)
    copy.start()
    buf[0:1, :] = jnp.zeros((1, 128), jnp.float32)  # races with the DMA's read
    copy.wait()


def _grid_add(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


_VMEM_DMA = [pltpu.VMEM((ROWS, 128), jnp.float32), pltpu.SemaphoreType.DMA(())]

# ---------------------------------------------------------- multi device


def _neighbours(n):
    me = lax.axis_index("x")
    return lax.rem(me + n - 1, n), lax.rem(me + 1, n)


def _permute(n, *, read_early=False, overwrite_early=False):
    def kernel(x_ref, o_ref, src, dst, send, recv):
        _, right = _neighbours(n)
        src[...] = x_ref[...]
        copy = pltpu.make_async_remote_copy(
            src, dst, send, recv, device_id=(right,), device_id_type=pl.DeviceIdType.MESH
        )
        copy.start()
        early = dst[0:1, :] if read_early else jnp.zeros((1, 128), jnp.float32)
        if overwrite_early:
            src[0:1, :] = jnp.zeros((1, 128), jnp.float32)
        copy.wait_send()
        copy.wait_recv()
        o_ref[...] = dst[...] + jnp.where(jnp.isnan(early), 0.0, 0.0)

    scratch = [
        pltpu.VMEM((ROWS, 128), jnp.float32),
        pltpu.VMEM((ROWS, 128), jnp.float32),
        pltpu.SemaphoreType.DMA(()),
        pltpu.SemaphoreType.DMA(()),
    ]
    call = _call(kernel, scratch, x_any=False)

    def fn(interpret, x):
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
        x = jax.device_put(x, NamedSharding(mesh, P("x")))
        return jax.shard_map(
            functools.partial(call, interpret), mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False
        )(x)

    return fn


# --------------------------------------------------- two cores, one device


def _cores(*, sync: bool):
    # Two TensorCores copy their block of x into the output; with `sync`
    # each then copies the OTHER core's block after a core_index handshake,
    # without it both write block 0 unordered.
    cores = 2

    def fn(interpret, x):
        mesh = core_mesh(cores)

        @pl.kernel(out_type=jax.ShapeDtypeStruct((2 * cores, ROWS, 128), x.dtype), mesh=mesh, interpret=interpret)
        def run(x_hbm, o_hbm):
            c = lax.axis_index("core")

            def body(sem, copy_sem):
                if sync:
                    pltpu.async_copy(x_hbm.at[c], o_hbm.at[cores + c], copy_sem).wait()
                    pl.semaphore_signal(sem, 1, core_index=1 - c)
                    pl.semaphore_wait(sem, 1)
                    pltpu.async_copy(o_hbm.at[cores + 1 - c], o_hbm.at[c], copy_sem).wait()
                else:
                    pltpu.async_copy(x_hbm.at[c], o_hbm.at[0], copy_sem).wait()

            pl.run_scoped(body, pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA(()))

        return run(x.reshape(cores, ROWS, 128)).reshape(-1, 128)

    return fn


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    devices: int
    race: bool


CASES = [
    Case("read_after_wait", _call(_read_after_wait, _VMEM_DMA), 1, False),
    Case("read_before_wait", _call(_read_before_wait, _VMEM_DMA), 1, True),
    Case(
        "overwrite_source_before_wait",
        _call(_overwrite_source_before_wait, _VMEM_DMA, x_any=False, out_any=True),
        1,
        True,
    ),
    Case("grid_add", _call(_grid_add, [], x_any=False, grid=(4,)), 1, False),
    Case("permute_2", _permute(2), 2, False),
    Case("permute_4", _permute(4), 4, False),
    Case("permute_read_before_wait_2", _permute(2, read_early=True), 2, True),
    Case("permute_overwrite_source_4", _permute(4, overwrite_early=True), 4, True),
    # One device with two cores; `devices=2` only sizes x (a block per core).
    Case("two_cores_handshake", _cores(sync=True), 2, False),
    Case("two_cores_same_block", _cores(sync=False), 2, True),
]


def _x(devices):
    return np.arange(devices * ROWS * 128, dtype=np.float32).reshape(devices * ROWS, 128)


def _ours(case, mode, detect, **kw):
    out = case.fn(
        mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=detect, on_race="warn", **kw), _x(case.devices)
    )
    return np.asarray(jax.block_until_ready(out))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_races_found_agrees_with_stock(case, mode):
    out_on = _ours(case, mode, True)
    ours = mosaic_rt.races.races_found
    reports = mosaic_rt.races.reports()
    assert ours == case.race, reports
    assert bool(reports) == ours
    out_off = _ours(case, mode, False)
    if case.devices == 1 or not case.race:
        # (A real race between threads -- devices or cores -- may resolve
        # either way from run to run.)
        np.testing.assert_array_equal(out_on, out_off)
    # A launch without detection leaves the last detecting launch's result.
    assert mosaic_rt.races.races_found == ours

    # jax >= 0.11 stock raises at the first race by default: ask it to report.
    report = {"on_race": "warn"} if STOCK_HAS_ON_RACE else {}
    stock_params = pltpu.InterpretParams(dma_execution_mode=STOCK_MODE[mode], detect_races=True, **report)
    stock_out = case.fn(stock_params, _x(case.devices))
    jax.block_until_ready(stock_out)
    assert stock_ipc.races.races_found == ours
    if not case.race:
        np.testing.assert_array_equal(np.asarray(stock_out), out_on)


def test_reports_name_both_accesses():
    _ours(CASES[1], "on_wait", True)
    report = mosaic_rt.races.reports()[0]
    assert report.startswith("RACE DETECTED: ")
    # Both sides: which access, the index ranges, and the kernel lines (the
    # DMA by the line that started it).
    here = __file__
    assert re.search(
        r"write of vmem buffer \d+ of device 0, core 0\[0:8, 0:128\] by DMA #0"
        rf" \(started by device 0, core 0 at {re.escape(here)}:\d+:\d+"
        r" \(_read_before_wait\)\)",
        report,
    ), report
    assert re.search(
        r"read of vmem buffer \d+ of device 0, core 0\[0:1, 0:128\] by device 0,"
        rf" core 0 at {re.escape(here)}:\d+:\d+ \(_read_before_wait\)",
        report,
    ), report
    assert mosaic_rt.races.count() >= 1


@pytest.mark.parametrize("mode", MODES)
def test_on_race_raise_fails_at_the_first_race(mode):
    with pytest.raises(mosaic_rt.RaceError, match=r"RACE DETECTED: .*\(_read_before_wait\)"):
        with mosaic_rt.native_errors():
            out = CASES[1].fn(
                mosaic_rt.InterpretParams(dma_execution_mode=mode, detect_races=True, on_race="raise"),
                _x(CASES[1].devices),
            )
            jax.block_until_ready(out)


@pytest.mark.parametrize("mode", MODES)
def test_on_race_warn_issues_one_race_warning_per_report(mode):
    with pytest.warns(mosaic_rt.RaceWarning, match=r"RACE DETECTED: .*\(_read_before_wait\)") as got:
        _ours(CASES[1], mode, True, python_warnings=True)
        # issued when the kernel ended: nothing is left to deliver
        assert mosaic_rt.deliver_reports() == 0
    assert len([w for w in got if w.category is mosaic_rt.RaceWarning]) == 1


def test_a_new_detecting_launch_resets_the_flag():
    _ours(CASES[1], "on_wait", True)
    assert mosaic_rt.races.races_found
    _ours(CASES[0], "on_wait", True)
    assert not mosaic_rt.races.races_found
    assert mosaic_rt.races.reports() == []


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mosaic_rt.races.nope  # noqa: B018


# ----------------------------------------- several cores, via the Runtime


def _rt(cores=2, **kw):
    return mosaic_rt.Runtime(1, cores, detect_races=True, **kw)


def test_runtime_two_cores_writing_one_hbm_element_race():
    rt = _rt()
    buf = rt.allocate_buffer(0, None, "hbm", np.zeros((8,), np.float32))
    rt.store(0, 0, "hbm", buf, np.ones((1,), np.float32), [(3, 1)])
    assert not mosaic_rt.races.races_found
    rt.store(0, 1, "hbm", buf, np.ones((1,), np.float32), [(3, 1)])
    assert mosaic_rt.races.races_found
    assert "by device 0, core 1" in mosaic_rt.races.reports()[0]


def test_runtime_signal_wait_orders_two_cores():
    rt = _rt()
    buf = rt.allocate_buffer(0, None, "hbm", np.zeros((8,), np.float32))
    sem = rt.allocate_semaphores(0, None, "regular", 1)
    rt.store(0, 0, "hbm", buf, np.ones((8,), np.float32))
    rt.signal(0, 0, sem, 1, target_core=1)
    rt.wait(0, 1, sem, 1)
    rt.load(0, 1, "hbm", buf)
    rt.store(0, 1, "hbm", buf, np.zeros((8,), np.float32))
    assert not mosaic_rt.races.races_found, mosaic_rt.races.reports()
