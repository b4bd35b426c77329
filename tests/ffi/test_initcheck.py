"""initcheck (``detect_uninitialized=True``): reads of kernel-local memory
that nothing wrote in this launch raise ``mosaic_rt.UninitializedReadError``
(a ``ValueError``) naming the buffer and the never-written range; through
``mosaic_rt.Runtime``, the FFI ops and (once the interpreter passes the
parameter on) ``pallas_call`` kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, on_devices, with_token
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = pytest.mark.timeout(120)


def rt(**kw):
    kw.setdefault("wait_timeout", 10.0)
    return mosaic_rt.Runtime(2, detect_uninitialized=True, **kw)


def test_the_error_type_is_a_value_error_exported_at_top_level():
    assert issubclass(mosaic_rt.UninitializedReadError, ValueError)
    assert "UninitializedReadError" in mosaic_rt.__all__


def test_a_fresh_scratch_read_names_the_never_written_range():
    r = rt()
    assert r.detect_uninitialized
    v = r.allocate_buffer(0, 0, "vmem", shape=(16, 128), dtype=np.float32)
    r.store(0, 0, "vmem", v, np.zeros((4, 128), np.float32), [(0, 4)])
    np.testing.assert_array_equal(r.load(0, 0, "vmem", v, [(0, 4)]), 0)
    with pytest.raises(mosaic_rt.UninitializedReadError) as e:
        r.load(0, 0, "vmem", v, [(0, 8)])
    assert str(e.value) == (
        "Uninitialized read of vmem buffer 100 of device 0, core 0 at [4:8, 0:128]: 512 of the "
        "1024 element(s) read ([0:8, 0:128]) were never written in this launch (no store, DMA, "
        "block copy or initial value wrote them)"
    )
    assert (e.value.device, e.value.core) == (0, 0)


def test_initial_values_dmas_and_hbm():
    r = rt(dma_execution_mode="eager")
    smem = r.allocate_buffer(1, 0, "smem", np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(r.load(1, 0, "smem", smem), np.arange(4))
    hbm = r.allocate_buffer(0, 0, "hbm", shape=(8,), dtype=np.float32)
    assert np.isnan(r.load(0, 0, "hbm", hbm)).all()  # HBM is not checked
    src = r.allocate_buffer(0, 0, "hbm", np.ones(8, np.float32))
    dst = r.allocate_buffer(0, 0, "vmem", shape=(8,), dtype=np.float32)
    sem = r.allocate_semaphores(0, 0, kind="dma")
    r.dma_start(0, 0, ("hbm", src, [(0, 4)]), ("vmem", dst, [(0, 4)]), sem)
    r.dma_wait(0, 0, sem, 16)
    np.testing.assert_array_equal(r.load(0, 0, "vmem", dst, [(0, 4)]), 1)
    with pytest.raises(mosaic_rt.UninitializedReadError, match=r"at \[4:8\]: 4 of the 8"):
        r.dma_start(0, 0, ("vmem", dst, None), ("hbm", src, None), sem)


def test_swaps_are_writes_of_what_their_mask_selects():
    # Pallas lowers `ref[...] = x` to a swap whose old value is dropped.
    r = rt()
    v = r.allocate_buffer(0, 0, "vmem", shape=(4,), dtype=np.int32)
    r.swap(0, 0, "vmem", v, np.arange(4, dtype=np.int32), mask=[False, False, True, False])
    assert r.load(0, 0, "vmem", v, [2]) == 2
    with pytest.raises(mosaic_rt.UninitializedReadError, match=r"at \[0:2\]: 2 of the 3"):
        r.load(0, 0, "vmem", v, [(0, 3)])


def test_detection_is_off_by_default():
    r = mosaic_rt.Runtime()
    assert not r.detect_uninitialized
    v = r.allocate_buffer(0, 0, "vmem", shape=(4,), dtype=np.float32)
    assert np.isnan(r.load(0, 0, "vmem", v)).all()


def test_ffi_loads_raise_the_type_through_native_errors():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid, detect_uninitialized=True) as k:
            k.token, b = F.allocate_buffer(k.token, k.handle, d, 0, space="vmem", dtype=np.float32, shape=(8, 128))
            k.token, x = F.load(
                k.token,
                k.handle,
                d,
                0,
                b,
                F.TracedRegion.slices((2, 3)),
                space="vmem",
                shape=(3, 128),
                dtype=np.float32,
            )
        return with_token(x[:1, :1].astype(jnp.int32), k.token)

    fn, args = on_devices(2, body, dummy_rows(2))
    with pytest.raises(mosaic_rt.UninitializedReadError, match=r"at \[2:5, 0:128\]: 384 of the 384"):
        with F.native_errors():
            jax.block_until_ready(fn(*args))


def test_ffi_without_the_attribute_reads_fill_values():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid) as k:
            k.token, b = F.allocate_buffer(k.token, k.handle, d, 0, space="vmem", dtype=np.float32, shape=(8,))
            k.token, x = F.load(k.token, k.handle, d, 0, b, None, space="vmem", shape=(8,), dtype=np.float32)
        return with_token(x[None], k.token)

    fn, args = on_devices(1, body, dummy_rows(1))
    with F.native_errors():
        assert np.isnan(np.asarray(fn(*args))).all()


# ------------------------------------------------------------- pallas_call


def test_interpret_params_take_the_flag():
    assert mosaic_rt.InterpretParams(detect_uninitialized=True).detect_uninitialized


def test_pallas_scratch_read_before_write_is_reported():
    def kernel(x_ref, o_ref, acc_ref):
        o_ref[...] = x_ref[...] + acc_ref[...]  # acc never written

    x = jnp.ones((8, 128), jnp.float32)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=mosaic_rt.InterpretParams(detect_uninitialized=True),
    )
    with pytest.raises(
        mosaic_rt.UninitializedReadError,
        match=r"vmem buffer 104 of device 0, core 0 at \[0:8, 0:128\]: 1024 of the 1024",
    ):
        with F.native_errors():
            jax.block_until_ready(call(x))


def test_pallas_half_written_output_block_is_reported_at_copy_out():
    def kernel(x_ref, o_ref):
        o_ref[:4, :] = x_ref[:4, :]

    x = jnp.ones((16, 128), jnp.float32)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=mosaic_rt.InterpretParams(detect_uninitialized=True),
    )
    with pytest.raises(mosaic_rt.UninitializedReadError, match=r"at \[4:8, 0:128\]: 512 of the 1024 element\(s\) read"):
        with F.native_errors():
            jax.block_until_ready(call(x))


# Corpus kernels that really read memory nothing wrote (fill-value reads).
_UNINITIALIZED_CASES = {"buffer_bounds_padded", "uninitialized_nan", "uninitialized_zero"}
_SAMPLE = [
    "add_2d",
    "matmul_f32_acc",
    "manual_double_buffer_dma",
    "run_scoped_nested",
    "scalar_prefetch_gather",
    "padding_not_divisible",
    "input_output_alias_partial",
    "semaphore_array_scratch",
    "uninitialized_nan",
    "buffer_bounds_padded",
]


def _corpus_cases(names=None):
    from kernels.single_device import CASES

    return [c for c in CASES if not (c.expect_error or c.ours_error) and (names is None or c.name in names)]


def _run_case(case):
    with F.native_errors():
        return jax.tree.map(np.asarray, case.fn(mosaic_rt.InterpretParams(detect_uninitialized=True), *case.args))


def _check_case(case):
    if case.name in _UNINITIALIZED_CASES:
        with pytest.raises(mosaic_rt.UninitializedReadError):
            _run_case(case)
    else:
        _run_case(case)  # no false report


@pytest.mark.parametrize("case", _corpus_cases(_SAMPLE), ids=lambda c: c.name)
def test_corpus_sample_reports_exactly_the_real_uninitialized_reads(case):
    _check_case(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _corpus_cases(), ids=lambda c: c.name)
def test_whole_corpus_reports_exactly_the_real_uninitialized_reads(case):
    _check_case(case)
