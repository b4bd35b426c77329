"""`pltpu.pack_elementwise` / `pltpu.unpack_elementwise` in kernels: sub-word
values packed into wider words and back (int4 weights in int8 / int32
words, bf16 pairs in 32-bit words). Neither has a CPU lowering nor a stock
interpret rule (stock fails to lower them), so the oracle is numpy: value
``i`` of a word lives in its bits ``[i * P, (i + 1) * P)``, lowest first.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not hasattr(pltpu, "unpack_elementwise"), reason="this jax has no pltpu.unpack_elementwise"),
]

RNG = np.random.default_rng(7)


def _call(kernel, out_shape, *args, mode="on_wait"):
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=mosaic_rt.InterpretParams(dma_execution_mode=mode))(
        *args
    )


def _fields(words: np.ndarray, bits: int, count: int, signed: bool) -> list:
    """The ``count`` fields of ``bits`` bits of each word, lowest first."""
    u = words.astype(np.int64) & ((1 << (words.dtype.itemsize * 8)) - 1)
    out = []
    for i in range(count):
        f = (u >> (i * bits)) & ((1 << bits) - 1)
        if signed:
            f = np.where(f >= 1 << (bits - 1), f - (1 << bits), f)
        out.append(f)
    return out


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
@pytest.mark.parametrize(
    ("word", "packed", "unpacked", "signed"),
    [
        (jnp.int8, jnp.int4, jnp.int8, True),
        (jnp.int32, jnp.int4, jnp.int32, True),
        (jnp.int32, jnp.int8, jnp.int32, True),
        (jnp.uint32, jnp.uint8, jnp.uint32, False),
        (jnp.int16, jnp.int8, jnp.int16, True),
    ],
)
def test_unpack_integer_fields(mode, word, packed, unpacked, signed):
    bits = jnp.iinfo(packed).bits
    count = jnp.iinfo(word).bits // bits
    info = jnp.iinfo(word)
    x = jnp.asarray(RNG.integers(info.min, info.max, (8, 128), endpoint=True), word)

    def kernel(x_ref, *o_refs):
        for i, o_ref in enumerate(o_refs):
            o_ref[...] = pltpu.unpack_elementwise(x_ref[...], index=i, packed_dtype=packed, unpacked_dtype=unpacked)

    outs = _call(kernel, [jax.ShapeDtypeStruct(x.shape, unpacked)] * count, x, mode=mode)
    for got, want in zip(outs, _fields(np.asarray(x), bits, count, signed)):
        np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want)


def test_pack_then_unpack_integers_round_trips_and_truncates():
    xs = [jnp.asarray(RNG.integers(-128, 128, (8, 128)), jnp.int32) for _ in range(4)]

    def kernel(a, b, c, d, w_ref, *o_refs):
        w = pltpu.pack_elementwise([a[...], b[...], c[...], d[...]], packed_dtype=jnp.int8)
        w_ref[...] = w
        for i, o_ref in enumerate(o_refs):
            o_ref[...] = pltpu.unpack_elementwise(w, index=i, packed_dtype=jnp.int8, unpacked_dtype=jnp.int32)

    shapes = [jax.ShapeDtypeStruct((8, 128), jnp.uint32)] + [jax.ShapeDtypeStruct((8, 128), jnp.int32)] * 4
    word, *back = _call(kernel, shapes, *xs)
    expected = np.zeros((8, 128), np.uint64)
    for i, x in enumerate(xs):
        expected |= (np.asarray(x).astype(np.int64) & 0xFF).astype(np.uint64) << np.uint64(8 * i)
    np.testing.assert_array_equal(np.asarray(word).astype(np.uint64), expected)
    for got, x in zip(back, xs):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(x))
    # Bits above the packed width are dropped: 0x1FF packs as 0xFF (-1).
    (word, *_) = _call(kernel, shapes, *([jnp.full((8, 128), 0x1FF, jnp.int32)] * 4))
    assert (np.asarray(word) == np.uint32(0xFFFFFFFF)).all()


def test_pack_f32_as_bf16_pairs_and_unpack():
    xs = [jnp.asarray(RNG.standard_normal((8, 128)), jnp.float32) for _ in range(2)]

    def kernel(a, b, w_ref, lo_ref, hi_ref):
        w = pltpu.pack_elementwise([a[...], b[...]], packed_dtype=jnp.bfloat16)
        w_ref[...] = w
        lo_ref[...] = pltpu.unpack_elementwise(w, index=0, packed_dtype=jnp.bfloat16, unpacked_dtype=jnp.float32)
        hi_ref[...] = pltpu.unpack_elementwise(w, index=1, packed_dtype=jnp.bfloat16, unpacked_dtype=jnp.float32)

    shapes = [jax.ShapeDtypeStruct((8, 128), jnp.uint32)] + [jax.ShapeDtypeStruct((8, 128), jnp.float32)] * 2
    word, lo, hi = _call(kernel, shapes, *xs)
    halves = [np.asarray(x.astype(jnp.bfloat16)).view(np.uint16).astype(np.uint32) for x in xs]
    np.testing.assert_array_equal(np.asarray(word), halves[0] | (halves[1] << np.uint32(16)))
    np.testing.assert_array_equal(np.asarray(lo), np.asarray(xs[0].astype(jnp.bfloat16).astype(jnp.float32)))
    np.testing.assert_array_equal(np.asarray(hi), np.asarray(xs[1].astype(jnp.bfloat16).astype(jnp.float32)))
