"""What running jax's own Pallas TPU ops on mosaic_rt found, kept as examples.

jax's `all_gather` kernel (`jax.experimental.pallas.ops.tpu.all_gather`) on a
1-D ring of 4 devices races under TPU interpret mode's `on_wait` DMA
semantics. At step i a device forwards, to its right neighbour, the chunk
it received from its left neighbour at step i-1, after waiting for its own
previous send and for one DMA's worth of bytes on its receive semaphore.
But its left neighbour may already have started its step-i DMA on that same
receive semaphore: it only waited for its step-(i-1) *send* (the read), not
for the write to land. With both incoming DMAs pending, the byte count can
be satisfied by the later one -- on_wait runs queued DMAs most recent first,
stock's rule ("as late as possible, as well as out-of-order") and ours --
and the device forwards a chunk that has not arrived: uninitialized data
(NaN, or int32 max) ends up in the output. Stock's on_wait gives the same
wrong, call-to-call varying outputs (jax 0.10.2 to 0.12; on 0.10.2 it
has also been seen to hang) and its race detector flags the same pair of accesses. In
`eager` mode each DMA lands at its start, the kernel is correct and no race
is reported (stock and ours).

So this is the kernel's race, not our semantics; with `detect_races=True`
mosaic_rt names both accesses and the kernel line of each DMA.

jax's int8 `paged_attention` shares one DMA semaphore between a page's int8
block and its scales and waits for each kind's total: no misuse report.

jax's `paged_attention` with `megacore_mode="kv_head"` or `"batch"` is
written for two TensorCores: the grid's leading "parallel" dimension is the
core, and each core's first step prefetches its first block only while the
`init_flag` scalar it keeps is set. Run by one core (the interpret-mode
default, `num_cores_or_threads=1`) the second half of the grid finds the flag
cleared by the first half, waits for a block nobody started, and can never
continue: stock hangs; mosaic_rt raises DeadlockError at once, saying that
the DMAs started on that semaphore all delivered and earlier waits took their
bytes. With two cores it runs and equals `megacore_mode=None` bit for bit.
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import all_gather as ag
from jax.experimental.pallas.ops.tpu import paged_attention as pa
from jax.sharding import Mesh
from mosaic_rt.jax_internals import STOCK_HAS_ON_RACE
from mosaic_rt.jax_internals import stock_interpreter as stock_ipc

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3])
ATTEMPTS = 5


def _all_gather_1d(memory_space=pltpu.VMEM, dtype=jnp.float32):
    if jax.device_count() < 4:
        pytest.skip("needs 4 devices")
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    x = (jnp.arange(32 * 128).reshape(32, 128).astype(jnp.float32) * 0.5).astype(dtype)
    fn = functools.partial(ag.all_gather, mesh=mesh, axis_name="x", memory_space=memory_space)
    return fn, x


def _ours(fn, x, dma, **kw):
    params = mosaic_rt.InterpretParams(dma_execution_mode=dma, **kw)
    with mosaic_rt.force_interpret_mode(params):
        return np.asarray(jax.block_until_ready(fn(x)))


def _remote_copy_lines():
    """The kernel lines of the two `async_remote_copy` calls (the DMAs that race)."""
    lines, first = inspect.getsourcelines(ag.ag_kernel)
    return {first + i for i, text in enumerate(lines) if "async_remote_copy(" in text}


@pytest.mark.parametrize("space", ["vmem", "any"])
def test_all_gather_1d_race_is_reported_with_both_dma_sites(space):
    fn, x = _all_gather_1d(pltpu.VMEM if space == "vmem" else pl.ANY)
    # The race shows when a device's left neighbour has run a step ahead (the
    # usual case: it is reported on nearly every launch); the detector sees
    # the interleaving that ran, so allow a few launches for it to come up.
    for _ in range(ATTEMPTS):
        _ours(fn, x, "on_wait", detect_races=True, on_race="warn")
        if mosaic_rt.races.races_found:
            break
    assert mosaic_rt.races.races_found
    reports = mosaic_rt.races.reports()
    assert reports
    report = reports[0]
    assert "is not ordered with" in report, report
    # Both accesses are DMAs of the kernel, each named by the line that started it.
    sites = [int(part.split(":")[0]) for part in report.split("all_gather.py:")[1:]]
    assert len(sites) == 2 and set(sites) <= _remote_copy_lines(), (report, _remote_copy_lines())
    assert report.count("(ag_kernel)") == 2, report


@pytest.mark.parametrize("space,dtype", [("vmem", jnp.float32), ("any", jnp.int32)])
def test_all_gather_1d_eager_is_correct_and_race_free(space, dtype):
    fn, x = _all_gather_1d(pltpu.VMEM if space == "vmem" else pl.ANY, dtype)
    out = _ours(fn, x, "eager", detect_races=True, on_race="warn")
    assert not mosaic_rt.races.races_found, mosaic_rt.races.reports()
    np.testing.assert_array_equal(out, np.asarray(x))


def test_all_gather_1d_on_wait_output_is_what_the_race_allows():
    """Whatever interleaving ran, every chunk of the output is either the
    right one or never written (uninitialized NaN): the race drops chunks,
    it never mixes them up."""
    fn, x = _all_gather_1d()
    out = _ours(fn, x, "on_wait")
    want = np.asarray(x)
    for half in range(8):  # 4 shards x (left, right) half-chunks of 4 rows
        rows = slice(4 * half, 4 * half + 4)
        assert np.array_equal(out[rows], want[rows]) or np.isnan(out[rows]).all(), half


@pytest.mark.slow
@pytest.mark.skipif(JAX_VERSION < (0, 11), reason="stock may hang on this kernel on jax 0.10.2")
def test_stock_reports_the_same_race():
    """Stock's own race detector flags the kernel in on_wait mode too."""
    fn, x = _all_gather_1d()
    kw = {"on_race": "warn"} if STOCK_HAS_ON_RACE else {}
    params = pltpu.InterpretParams(dma_execution_mode="on_wait", detect_races=True, **kw)
    for _ in range(ATTEMPTS):  # as for ours: the interleaving that ran decides
        try:
            with pltpu.force_tpu_interpret_mode(params):
                jax.block_until_ready(fn(x))
        except Exception as e:  # noqa: BLE001 - stock's default on_race raises from a device thread
            assert "RACE DETECTED" in str(e), e
        if stock_ipc.races is not None and stock_ipc.races.races_found:
            break
    assert stock_ipc.races is not None and stock_ipc.races.races_found


def _paged(megacore_mode, inline_seq_dim):
    q = jax.random.normal(jax.random.key(0), (2, 4, 128), jnp.float32)
    k = jax.random.normal(jax.random.key(1), (2, 16, 16, 128), jnp.float32)
    v = jax.random.normal(jax.random.key(2), (2, 16, 16, 128), jnp.float32)
    lengths = jnp.array([37, 61], jnp.int32)
    pages = jnp.asarray(np.random.default_rng(1).permutation(16)[:8].reshape(2, 4), jnp.int32)
    fn = jax.jit(
        lambda *a: pa.paged_attention(
            *a, pages_per_compute_block=2, megacore_mode=megacore_mode, inline_seq_dim=inline_seq_dim
        )
    )
    return fn, (q, k, v, lengths, pages)


def _run(fn, args, dma, cores):
    params = mosaic_rt.InterpretParams(dma_execution_mode=dma, num_cores_or_threads=cores)
    with mosaic_rt.force_interpret_mode(params):
        return np.asarray(jax.block_until_ready(fn(*args)))


@pytest.mark.parametrize("megacore_mode", ["kv_head", "batch"])
@pytest.mark.parametrize("dma", ["on_wait", "eager"])
def test_paged_attention_megacore_on_one_core_is_a_reported_deadlock(megacore_mode, dma):
    fn, args = _paged(megacore_mode, inline_seq_dim=False)
    with pytest.raises(mosaic_rt.DeadlockError) as e:
        _run(fn, args, dma, cores=1)
    msg = str(e.value)
    assert "waits on DMA semaphore" in msg and "(count is 0)" in msg, msg
    assert "(MultiPageAsyncCopyDescriptor.wait_and_get_loaded)" in msg, msg
    assert "have all delivered" in msg and "and earlier waits took" in msg, msg


@pytest.mark.parametrize("megacore_mode", ["kv_head", "batch"])
@pytest.mark.parametrize("inline_seq_dim", [False, True])
def test_paged_attention_megacore_on_two_cores_equals_one_core_without_it(megacore_mode, inline_seq_dim):
    fn, args = _paged(megacore_mode, inline_seq_dim)
    plain, plain_args = _paged(None, inline_seq_dim)
    want = _run(plain, plain_args, "on_wait", cores=1)
    for dma in ("on_wait", "eager"):
        np.testing.assert_array_equal(_run(fn, args, dma, cores=2), want)


# jax's int8 paged attention starts each page's int8 block and its scales on one
# DMA semaphore, then waits for all the pages, then for all the scales: waits for
# one kind's total among pending DMAs of two sizes. That is no misuse (stock says
# nothing); mosaic_rt's wait-size check once reported it.
@pytest.mark.parametrize("dma", ["on_wait", "eager"])
def test_int8_paged_attention_waits_per_kind_are_no_misuse(dma, caplog, capsys):
    import logging

    from jax.experimental.pallas.ops.tpu.paged_attention import quantization_utils as q8

    fn, (q, k, v, lengths, pages) = _paged(None, inline_seq_dim=True)
    k, v = q8.quantize_to_int8(k), q8.quantize_to_int8(v)
    with caplog.at_level(logging.WARNING):
        out = _run(fn, (q, k, v, lengths, pages), dma, cores=1)
    assert np.isfinite(out).all()
    reports = [r.getMessage() for r in caplog.records if r.name.startswith("mosaic_rt")]
    assert reports == []
    captured = capsys.readouterr()
    assert "bytes on DMA semaphore" not in captured.out + captured.err
