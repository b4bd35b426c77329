"""Races, leaks and misuse as Python warnings and errors, with source sites.

Through the FFI wrappers directly (the interpreter wires sites, `on_race`
and the report callback itself): reports of policy "warn" are queued
natively, counted by the `pending_reports` op and issued by
`mosaic_rt.ffi.reports.deliver()` as `RaceWarning` / `SemaphoreLeakWarning`
/ `MisuseWarning`; `on_race="raise"` fails the launch with `RaceError`.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, run_on_devices, with_token
from mosaic_rt import _native
from mosaic_rt.ffi import reports

pytestmark = pytest.mark.timeout(120)

_F32 = np.float32
_SITE_START = _native.intern_site("k.py:2:4 (racy)")
_SITE_LOAD = _native.intern_site("k.py:3:8 (racy)")
_SITE_ALLOC = _native.intern_site("k.py:1:0 (leaky)")


@pytest.fixture(autouse=True)
def _empty_queue(monkeypatch):
    # These tests read the native queue itself: the launch-end sink must
    # leave it alone (the interpreter's path is tests/api/test_report_delivery.py).
    monkeypatch.setattr(reports, "deliver_from_launch", lambda handle, device: None)
    reports.take()
    yield
    reports.take()


def _racy(on_race, *, deliver=False):
    """A DMA writes `dst` while the core reads it before waiting: a race."""
    uid = fresh_uid()
    x = np.arange(8 * 128, dtype=_F32).reshape(8, 128)

    def body(d, _):
        with begin(d, 1, uid=uid, dma_execution_mode="eager", detect_races=True, on_race=on_race) as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=_F32, shape=(8, 128), init=x)
            t, dst = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=_F32, shape=(8, 128))
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="dma")
            t = F.dma_start(
                t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src), F.DmaSide("vmem", dst), sem, site=_SITE_START)
            )
            t, v = F.load(
                t,
                h,
                d,
                0,
                dst,
                F.TracedRegion.slices((0, 8), (0, 128)),
                space="vmem",
                shape=(8, 128),
                dtype=_F32,
                site=_SITE_LOAD,
            )
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 8 * 128 * 4))
            t, n = F.pending_reports(t)
            if deliver:
                # What the interpreter emits at kernel end.
                t = jax.lax.cond(
                    n > 0,
                    lambda tok: (
                        tok
                        + jax.experimental.io_callback(
                            lambda: np.int32(reports.deliver() * 0), jax.ShapeDtypeStruct((), jnp.int32)
                        )
                    ),
                    lambda tok: tok,
                    t,
                )
            k.token = t
        return with_token(jnp.stack([n, v[0, 1].astype(jnp.int32)])[None], k.token)

    with mosaic_rt.native_errors():
        return run_on_devices(1, body, dummy_rows(1))


_RACE_TEXT = (
    "RACE DETECTED: read of vmem buffer 101 of device 0, core 0[0:8, 0:128] by device 0, "
    "core 0 at k.py:3:8 (racy) is not ordered with the earlier write of vmem buffer 101 of "
    "device 0, core 0[0:8, 0:128] by DMA #0 (started by device 0, core 0 at k.py:2:4 (racy))"
)


def test_on_race_raise_fails_the_launch_with_race_error_naming_both_sides():
    with pytest.raises(mosaic_rt.RaceError) as info:
        _racy("raise")
    assert str(info.value) == _RACE_TEXT
    assert isinstance(info.value, RuntimeError)
    assert (info.value.device, info.value.core) == (0, 0)
    assert mosaic_rt.races.races_found
    assert mosaic_rt.races.reports() == [_RACE_TEXT]


def test_on_race_warn_queues_a_structured_report():
    out = _racy("warn")
    assert out[0, 0] >= 1  # pending_reports saw it
    got = reports.take()
    assert len(got) == 1
    category, text, details, as_warning = got[0]
    assert as_warning
    assert (category, text) == ("race", _RACE_TEXT)
    assert details["access"] == "read" and details["earlier_access"] == "write"
    assert details["site"] == "k.py:3:8 (racy)"
    assert details["earlier_site"] == "k.py:2:4 (racy)"
    assert details["earlier_dma"] == 0 and details["dma"] is None
    assert (details["space"], details["buffer"], details["region"]) == ("vmem", 101, "[0:8, 0:128]")
    assert mosaic_rt.races.reports() == [_RACE_TEXT]


def test_deliver_issues_race_warnings_once_per_text():
    with pytest.warns(mosaic_rt.RaceWarning, match="RACE DETECTED: read of vmem buffer 101"):
        _racy("warn", deliver=True)
    assert reports.pending() == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        _racy("warn")
        _racy("warn")
        assert reports.deliver() == 2
    assert [type(w.message) for w in caught] == [mosaic_rt.RaceWarning]


def test_race_warnings_can_be_turned_into_errors():
    _racy("warn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", mosaic_rt.RaceWarning)
        with pytest.raises(mosaic_rt.RaceWarning):
            reports.deliver()


def _leaky(policy, mode="on_wait"):
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, dma_execution_mode=mode) as k:
            h, t = k.handle, k.token
            t, sem = F.allocate_semaphores(t, h, d, 0, site=_SITE_ALLOC)
            t, dsem = F.allocate_semaphores(t, h, d, 0, kind="dma", site=_SITE_ALLOC)
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=_F32, shape=(8,))
            t, dst = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=_F32, shape=(8,))
            t = F.semaphore_signal(t, h, d, 0, sem, 3)
            t = F.dma_start(
                t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src), F.DmaSide("vmem", dst), dsem, site=_SITE_START)
            )
            t, n = F.leak_report(t, h, d, policy=policy)
            k.token = t
        return with_token(n[None, None], k.token)

    with mosaic_rt.native_errors():
        return run_on_devices(1, body, dummy_rows(1))


def test_leak_warn_reports_name_kind_count_and_sites():
    out = _leaky("warn")
    assert out[0, 0] == 2
    got = reports.take()
    assert [c for c, _, _, _ in got] == ["leak", "leak"]
    texts = [t for _, t, _, _ in got]
    assert texts[0] == (
        "semaphore leak at kernel exit on device 0: REGULAR semaphore 2000 "
        "(allocated at k.py:1:0 (leaky)) on core 0 has count 3"
    )
    assert texts[1].startswith(
        "semaphore leak at kernel exit on device 0: DMA semaphore 2001 "
        "(allocated at k.py:1:0 (leaky)) on core 0 has count 0 and 1 DMA(s) "
        "started but never waited for"
    )
    assert "started on device 0, core 0 at k.py:2:4 (racy)" in texts[1]
    details = got[1][2]
    assert (details["kind"], details["device"], details["core"], details["count"]) == ("DMA", 0, 0, 0)
    assert details["site"] == "k.py:1:0 (leaky)"
    assert details["pending_dma_sites"] == "k.py:2:4 (racy)"
    with pytest.warns(mosaic_rt.SemaphoreLeakWarning, match="REGULAR semaphore 2000"):
        _leaky("warn")
        reports.deliver()


def test_leak_raise_names_the_allocation_site():
    with pytest.raises(mosaic_rt.SemaphoreLeakError, match=r"allocated at k.py:1:0 \(leaky\)"):
        _leaky("raise", mode="eager")


def test_a_dma_wait_matching_no_pending_dma_is_a_misuse_warning():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, dma_execution_mode="on_wait") as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=_F32, shape=(16, 128))
            t, dst = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=_F32, shape=(16, 128))
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="dma")
            half = [F.TracedRegion.slices((0, 8)), F.TracedRegion.slices((8, 8))]
            for r in half:
                t = F.dma_start(
                    t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src, r), F.DmaSide("vmem", dst, r), sem, site=_SITE_START)
                )
            # Legit: one wait for both (the total), then nothing left.
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 8192))
            for r in half:
                t = F.dma_start(
                    t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src, r), F.DmaSide("vmem", dst, r), sem, site=_SITE_START)
                )
            # Legit: one wait per copy.
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 4096))
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 4096))
            for r in half:
                t = F.dma_start(
                    t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src, r), F.DmaSide("vmem", dst, r), sem, site=_SITE_START)
                )
            # Misuse: 1 KiB matches neither copy (4 KiB each) nor both --
            # reported once the semaphore is seen to leak at the end.
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 1024, site=_SITE_LOAD))
            t, before = F.pending_reports(t)
            t, leaks = F.leak_report(t, h, d, policy="warn")
            t, after = F.pending_reports(t)
            k.token = t
        return with_token(jnp.stack([before, leaks, after])[None], k.token)

    with mosaic_rt.native_errors():
        out = run_on_devices(1, body, dummy_rows(1))
    assert out[0].tolist() == [0, 1, 2]
    [(category, text, details, _), (leak, *_)] = reports.take()
    assert (category, leak) == ("misuse", "leak")
    assert text.startswith(
        "dma_wait at k.py:3:8 (racy) on device 0, core 0 waits for 1024 bytes on "
        "DMA semaphore 2000, but the DMA(s) pending on it move 4096 bytes "
        "(started at k.py:2:4 (racy)), 4096 bytes"
    ), text
    assert details["pending_bytes"] == "4096,4096"


def test_dma_waits_in_another_order_than_the_starts_are_no_misuse():
    # Copies of 4 KiB and 1 KiB, waited as two halves of 2.5 KiB (no sum of
    # the sizes): fine on a TPU (the semaphore counts bytes), and the kernel
    # ends clean, so nothing is reported.
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, dma_execution_mode="on_wait") as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=_F32, shape=(16, 128))
            t, dst = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=_F32, shape=(16, 128))
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="dma")
            big, small = F.TracedRegion.slices((0, 8)), F.TracedRegion.slices((8, 2))
            t = F.dma_start(
                t, h, d, 0, F.DmaStart(F.DmaSide("hbm", src, big), F.DmaSide("vmem", dst, big), sem, site=_SITE_START)
            )
            t = F.dma_start(
                t,
                h,
                d,
                0,
                F.DmaStart(F.DmaSide("hbm", src, small), F.DmaSide("vmem", dst, small), sem, site=_SITE_START),
            )
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 2560, site=_SITE_LOAD))
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 2560, site=_SITE_LOAD))
            t, leaks = F.leak_report(t, h, d, policy="warn")
            t, n = F.pending_reports(t)
            k.token = t
        return with_token(jnp.stack([leaks, n])[None], k.token)

    with mosaic_rt.native_errors():
        out = run_on_devices(1, body, dummy_rows(1))
    assert out[0].tolist() == [0, 0]
    assert reports.take() == []


def test_pending_reports_counts_the_queue():
    assert reports.pending() == 0
    _leaky("warn")
    assert reports.pending() == 2
    assert reports.deliver.__doc__


# ------------------------------------------------------ explicit remote targets


@pytest.mark.parametrize("target", [-1, -7, 2])
def test_a_bad_signal_target_device_is_named_with_the_valid_range(target):
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, sem, 1, target_device=target)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    with pytest.raises(ValueError, match=rf"device id {target} out of range: .*0 to 1"):
        with mosaic_rt.native_errors():
            run_on_devices(2, body, dummy_rows(2))


def test_a_negative_target_core_is_an_error_not_core_0():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, num_cores=2) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, None)
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, sem, 1, target_core=-1)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    with pytest.raises(ValueError, match=r"target core id -1 out of range: valid ids are 0 to 1"):
        with mosaic_rt.native_errors():
            run_on_devices(1, body, dummy_rows(1))


def test_a_negative_dma_destination_device_is_named():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid) as k:
            h, t = k.handle, k.token
            t, buf = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=_F32, shape=(8,))
            t, sems = F.allocate_semaphores(t, h, d, 0, kind="dma", count=2)
            # Device 0 names device -1; device 1 copies to itself (a copy
            # to device 0 could find its buffer not allocated yet).
            t = F.dma_start(
                t,
                h,
                d,
                0,
                F.DmaStart(
                    F.DmaSide("vmem", buf),
                    F.DmaSide("vmem", buf),
                    sems + 1,
                    src_sem=sems,
                    dst_device=jnp.where(d == 0, -1, d),
                ),
            )
            k.token = t
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    with pytest.raises(
        ValueError,
        match=r"destination device id -1 out of range: valid ids are "
        r"0 to 1 \(2 in the launch\)",
    ):
        with mosaic_rt.native_errors():
            run_on_devices(2, body, dummy_rows(2))


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_dma_to_another_core_of_the_same_device(mode):
    uid = fresh_uid()
    x = np.arange(8, dtype=_F32)

    def body(d, _):
        with begin(d, 1, uid=uid, num_cores=2, dma_execution_mode=mode) as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, None, space="vmem", dtype=_F32, shape=(8,))
            t = F.store(t, h, d, 0, src, None, jnp.asarray(x), space="vmem")
            t, send = F.allocate_semaphores(t, h, d, None, kind="dma")
            t, recv = F.allocate_semaphores(t, h, d, None, kind="dma")
            t = F.dma_start(
                t,
                h,
                d,
                0,
                F.DmaStart(
                    F.DmaSide("vmem", src), F.DmaSide("vmem", src), recv, src_sem=send, dst_device=d, dst_core=1
                ),
            )
            t = F.dma_wait(t, h, d, 0, F.DmaWait(send, 32))
            t = F.dma_wait(t, h, d, 1, F.DmaWait(recv, 32))
            t, got = F.load(t, h, d, 1, src, None, space="vmem", shape=(8,), dtype=_F32)
            t, mine = F.load(t, h, d, 0, src, None, space="vmem", shape=(8,), dtype=_F32)
            k.token = t
        return with_token(jnp.stack([got, mine])[None], k.token)

    with mosaic_rt.native_errors():
        out = run_on_devices(1, body, dummy_rows(1))
    np.testing.assert_array_equal(out[0, 0], x)
    np.testing.assert_array_equal(out[0, 1], x)


def test_sites_are_interned_once():
    a = _native.intern_site("some_file.py:10:2 (f)")
    assert a == _native.intern_site("some_file.py:10:2 (f)") != 0
    assert _native.site_text(a) == "some_file.py:10:2 (f)"
    assert _native.site_text(0) is None
