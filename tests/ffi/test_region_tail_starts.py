"""Regions with several dynamic scalar starts: the first is the op's start
operand, the others trailing scalar operands (no start vector is built in
the program, so XLA compiles no concatenate for it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt.ffi as F
import mosaic_rt.ffi.ops as ffi_ops
import numpy as np
import pytest
from ffi_support import begin, fresh_uid, on_devices, with_token
from test_ops import _bad_launch, _i32, _raw_call, translated

pytestmark = pytest.mark.timeout(120)


def _body(uid):
    x = np.arange(4 * 6 * 8, dtype=np.int32).reshape(4, 6, 8)

    def body(d, xin):
        with begin(d, 1, uid=uid) as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=np.int32, shape=x.shape, init=xin)
            t, dst = F.allocate_buffer(
                t, h, d, 0, space="vmem", dtype=np.int32, shape=(3, 2, 8), init=jnp.zeros((3, 2, 8), jnp.int32)
            )
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="dma")

            def step(i, carry):
                t, acc = carry
                j = (i * 2) % 5  # traced: every start below is dynamic
                # src[i+1, j, :] (two dynamic starts) -> dst[i, 1, :] (one dynamic, one static)
                t = F.dma_start(
                    t,
                    h,
                    d,
                    0,
                    F.DmaStart(
                        F.DmaSide("hbm", src, F.TracedRegion.index(i + 1, j)),
                        F.DmaSide("vmem", dst, F.TracedRegion.index(i, 1)),
                        sem,
                    ),
                )
                t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 8 * 4))
                t, row = F.load(t, h, d, 0, dst, F.TracedRegion.index(i, 1), space="vmem", shape=(8,), dtype=np.int32)
                # dst[i, 0, 2:6] = 10 * row[2:6], two dynamic starts and a sliced dim
                t = F.store(
                    t,
                    h,
                    d,
                    0,
                    dst,
                    F.TracedRegion.slices((i, 1), (i * 0, 1), (2, 4)),
                    (10 * row[2:6]).reshape(1, 1, 4),
                    space="vmem",
                )
                t, old = F.swap(t, h, d, 0, src, F.TracedRegion.index(i, j), -row, space="hbm")
                return t, acc + old.sum()

            t, acc = jax.lax.fori_loop(0, 3, step, (t, jnp.int32(0)))
            t, got = F.load(t, h, d, 0, dst, None, space="vmem", shape=(3, 2, 8), dtype=np.int32)
            t, back = F.load(t, h, d, 0, src, None, space="hbm", shape=x.shape, dtype=np.int32)
            k.token = t
        return with_token(got, k.token), back, acc[None]

    return x, body


def test_several_dynamic_starts_reach_the_right_elements():
    x, body = _body(fresh_uid())
    got, back, acc = translated(1, body, x)
    want, src, total = np.zeros((3, 2, 8), np.int32), x.copy(), 0
    for i in range(3):
        j = (i * 2) % 5
        row = src[i + 1, j].copy()
        want[i, 1] = row
        want[i, 0, 2:6] = 10 * row[2:6]
        total += int(src[i, j].sum())
        src[i, j] = -row
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(back, src)
    assert int(acc[0]) == total


def test_several_dynamic_starts_build_no_start_vector():
    x, body = _body(fresh_uid())
    fn, args = on_devices(1, body, x)
    hlo = fn.lower(*args).compile().as_text()
    assert "mosaic_rt_dma_start" in hlo or "mosaic_rt_batch" in hlo
    assert "tail_starts" in hlo
    assert "concatenate" not in hlo


def test_fill_with_several_dynamic_starts():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, uninitialized_memory="zero") as k:
            h, t = k.handle, k.token
            t, b = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=np.int32, shape=(3, 4, 8))

            def put(i, tok):
                # b[i, 3 - i, 1:5] = i + 1, and the old contents of that window
                tok, old = F.fill(
                    tok,
                    h,
                    d,
                    0,
                    b,
                    F.TracedRegion.slices((i, 1), (3 - i, 1), (1, 4)),
                    (i + 1).astype(jnp.int32),
                    space="vmem",
                    old_shape=(1, 1, 4),
                )
                return tok

            t = jax.lax.fori_loop(0, 3, put, t)
            t, v = F.load(t, h, d, 0, b, None, space="vmem", shape=(3, 4, 8), dtype=np.int32)
            k.token = t
        return with_token(v, k.token)

    want = np.zeros((3, 4, 8), np.int32)
    for i in range(3):
        want[i, 3 - i, 1:5] = i + 1
    np.testing.assert_array_equal(translated(1, body), want)


@pytest.mark.parametrize(
    "tail,pattern",
    [
        # the region takes one trailing start; one more is left over
        (2, r"1 trailing start operand\(s\) left over"),
        # no trailing start for the region's second dynamic start
        (0, r"has 2 sizes but 0 fixed starts and 1 dynamic starts"),
    ],
)
def test_a_miscounted_tail_is_a_value_error(tail, pattern):
    def make_op(d, k):
        t, b = F.allocate_buffer(
            k.token, k.handle, d, 0, space="vmem", dtype=np.int32, shape=(4, 4), init=jnp.zeros((4, 4), jnp.int32)
        )
        ops = [t, k.handle, _i32(d), _i32(0), b, _i32(1), _i32(2)] + [_i32(3)] * (tail - 1)
        attrs = dict(
            space=ffi_ops.MEMORY_SPACES["vmem"],
            sizes=np.array([1, 1], np.int64),
            strides=np.array([1, 1], np.int64),
            squeezed=np.array([1, 1], np.int64),
        )
        if tail:
            attrs["tail_starts"] = np.int64(tail)
        else:
            ops = ops[:6]
        t, _ = _raw_call("mosaic_rt_load", ops, (jax.ShapeDtypeStruct((), jnp.int32),), **attrs)
        return t

    with pytest.raises(ValueError, match=pattern):
        _bad_launch(make_op)
