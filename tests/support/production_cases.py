"""The corpus of jax's own production Pallas TPU ops (`jax.experimental.pallas.ops.tpu`):
the cases tests/production/test_production_kernels.py runs on mosaic_rt and the TPU
compile check sweeps, with how each is checked.

Every case calls the op shipped with the installed jax (never a copy) at a
small shape, forced onto an interpreter with `force_interpret_mode`:

* where stock interpret mode runs the op, mosaic_rt's output must be
  bit-identical to stock's (for the DMA-heavy ops in both
  `dma_execution_mode`s);
* where stock cannot (it fails, or may hang), mosaic_rt's output must equal
  the op's own reference implementation (`mha_reference`,
  `make_masked_mha_reference`, `ref_ragged_paged_attention`, jnp for gmm and
  all-gather, jax's own threefry) within a tolerance.

Known stock failures are listed in `STOCK_CANNOT` with the reason; stock is
never run on a case that may hang (all-gather over a 1-D mesh hangs on
jax 0.10.2). Cases that take more than a couple of seconds are marked slow
(the default run deselects them).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3])
MODES = ("on_wait", "eager")


# -- running one op under an interpreter -------------------------------------------------


def _ours(dma="on_wait", **kw):
    return mosaic_rt.force_interpret_mode(mosaic_rt.InterpretParams(dma_execution_mode=dma, **kw))


def _stock(dma="on_wait"):
    return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(dma_execution_mode=dma))


def _numpy(tree):
    return jax.tree.map(np.asarray, tree)


def run(side: str, fn: Callable, args, dma: str = "on_wait", **kw):
    """`fn(*args)` with every pallas_call on `side` ("ours" / "stock"), as numpy,
    and the wall time of that (first) call."""
    ctx = _ours(dma, **kw) if side == "ours" else _stock(dma)
    start = time.perf_counter()
    with ctx:
        out = _numpy(jax.block_until_ready(fn(*args)))
    return out, time.perf_counter() - start


def assert_bit_identical(ours, stock):
    leaves_o, tree_o = jax.tree.flatten(ours)
    leaves_s, tree_s = jax.tree.flatten(stock)
    assert tree_o == tree_s
    for i, (a, b) in enumerate(zip(leaves_o, leaves_s)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, a.shape, b.dtype, b.shape)
        if a.tobytes() != b.tobytes():
            diff = np.argwhere(a.view(np.uint8).reshape(a.shape + (-1,)) != b.view(np.uint8).reshape(b.shape + (-1,)))
            raise AssertionError(f"output {i} differs from stock at {len(diff)} byte(s), first at {diff[0].tolist()}")


def assert_close(ours, expected, atol, rtol):
    leaves_o, _ = jax.tree.flatten(ours)
    leaves_e, _ = jax.tree.flatten(expected)
    assert len(leaves_o) == len(leaves_e)
    for a, b in zip(leaves_o, leaves_e):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=atol, rtol=rtol)


def _rand(key, shape, dtype=jnp.float32, scale=1.0):
    return (jax.random.normal(jax.random.key(key), shape, jnp.float32) * scale).astype(dtype)


# -- the cases ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    build: Callable  # () -> (fn, args); fn(*args) runs the op
    reference: Callable | None = None  # (*args) -> expected, plain jnp (XLA alone)
    atol: float = 2e-5
    rtol: float = 2e-5
    stock: str | None = None  # why stock cannot run it (None: it can)
    dma_modes: tuple = ("on_wait",)
    slow: bool = False
    devices: int = 1
    xfail: str | None = None  # a known mosaic_rt failure (reason), not strict
    check: Callable | None = None  # (ours, *args) -> None: extra property checks


CASES: list[Case] = []


def case(name, **kw):
    def register(build):
        CASES.append(Case(name, build, **kw))
        return build

    return register


# flash attention ---------------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import flash_attention as fa  # noqa: E402


def _qkv(b=1, h=2, s=256, d=64, seed=0):
    return tuple(_rand(seed + i, (b, h, s, d)) for i in range(3))


def _fa_blocks():
    return fa.BlockSizes(
        block_q=128,
        block_k_major=128,
        block_k=128,
        block_b=1,
        block_q_major_dkv=128,
        block_k_major_dkv=128,
        block_k_dkv=128,
        block_q_dkv=128,
        block_k_major_dq=128,
        block_k_dq=128,
        block_q_dq=128,
    )


def _segments(b, s):
    ids = jnp.broadcast_to((jnp.arange(s) >= s // 3).astype(jnp.int32) + (jnp.arange(s) >= 2 * s // 3), (b, s))
    return fa.SegmentIds(q=ids, kv=ids)


def _fa_ref(causal, segments):
    def ref(q, k, v):
        seg = _segments(q.shape[0], q.shape[2]) if segments else None
        return fa.mha_reference(q, k, v, None, seg, causal=causal, sm_scale=0.125)

    return ref


for _causal in (False, True):
    for _seg in (False, True):

        def _build_fa(causal=_causal, seg=_seg):
            q, k, v = _qkv()
            segment_ids = _segments(1, 256) if seg else None
            fn = lambda q, k, v: fa.flash_attention(  # noqa: E731
                q, k, v, segment_ids=segment_ids, causal=causal, sm_scale=0.125, block_sizes=_fa_blocks()
            )
            return fn, (q, k, v)

        case(f"flash_attention fwd causal={_causal} segment_ids={_seg}", reference=_fa_ref(_causal, _seg))(_build_fa)


def _fa_grad_fn(causal, segments, attention):
    def loss(q, k, v):
        seg = _segments(q.shape[0], q.shape[2]) if segments else None
        return jnp.sum(attention(q, k, v, seg, causal) * jnp.cos(jnp.arange(q.shape[-1])))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


for _causal in (False, True):

    def _build_fa_bwd(causal=_causal):
        op = lambda q, k, v, seg, causal: fa.flash_attention(  # noqa: E731
            q, k, v, segment_ids=seg, causal=causal, sm_scale=0.125, block_sizes=_fa_blocks()
        )
        return _fa_grad_fn(causal, False, op), _qkv(s=256)

    def _ref_fa_bwd(q, k, v, causal=_causal):
        op = lambda q, k, v, seg, causal: fa.mha_reference_no_custom_vjp(  # noqa: E731
            q, k, v, None, seg, causal=causal, sm_scale=0.125
        )
        return _fa_grad_fn(causal, False, op)(q, k, v)

    case(f"flash_attention bwd causal={_causal}", reference=_ref_fa_bwd, atol=1e-3, rtol=1e-3, slow=_causal)(
        _build_fa_bwd
    )


# splash attention ----------------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import splash_attention as sa  # noqa: E402

_SA_H, _SA_S, _SA_D = 2, 256, 64


def _sa_blocks():
    return sa.BlockSizes(
        block_q=128,
        block_kv=128,
        block_kv_compute=128,
        block_q_dkv=128,
        block_kv_dkv=128,
        block_kv_dkv_compute=128,
        block_q_dq=128,
        block_kv_dq=128,
    )


def _sa_mask(kind):
    shape = (_SA_S, _SA_S)
    if kind == "causal":
        m = sa.CausalMask(shape)
    elif kind == "local":
        m = sa.LocalMask(shape, window_size=(64, 32), offset=0)
    elif kind == "numpy":
        m = sa.NumpyMask((np.random.default_rng(0).random(shape) < 0.5) | np.eye(_SA_S, dtype=bool))
    else:
        m = sa.FullMask(shape)
    return sa.MultiHeadMask([m] * _SA_H)


def _sa_inputs(mqa):
    q = _rand(10, (_SA_H, _SA_S, _SA_D))
    kv_shape = (_SA_S, _SA_D) if mqa else (_SA_H, _SA_S, _SA_D)
    return q, _rand(11, kv_shape), _rand(12, kv_shape)


def _splash(kind, mqa, soft_cap):
    make = sa.make_splash_mqa_single_device if mqa else sa.make_splash_mha_single_device
    return make(_sa_mask(kind), block_sizes=_sa_blocks(), attn_logits_soft_cap=soft_cap)


def _sa_reference(kind, mqa, soft_cap):
    def ref(q, k, v):
        make = sa.make_masked_mqa_reference if mqa else sa.make_masked_mha_reference
        mask = jnp.asarray(_sa_mask(kind)[:, :, :])
        return make(mask)(q, k, v, attn_logits_soft_cap=soft_cap)

    return ref


for _kind, _mqa, _cap in [
    ("causal", False, None),
    ("causal", True, None),
    ("local", False, None),
    ("numpy", False, None),
    ("full", False, 30.0),
]:

    def _build_sa(kind=_kind, mqa=_mqa, cap=_cap):
        kernel = _splash(kind, mqa, cap)
        return jax.jit(lambda q, k, v: kernel(q, k, v)), _sa_inputs(mqa)

    case(
        f"splash fwd {'mqa' if _mqa else 'mha'} mask={_kind} soft_cap={_cap}",
        reference=_sa_reference(_kind, _mqa, _cap),
        atol=1e-4,
        rtol=1e-4,
    )(_build_sa)


def _sa_grad(attention, mqa):
    def loss(q, k, v):
        return jnp.sum(attention(q, k, v) * jnp.cos(jnp.arange(_SA_D)))

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


for _mqa in (False, True):

    def _build_sa_bwd(mqa=_mqa):
        kernel = _splash("causal", mqa, None)
        return _sa_grad(lambda q, k, v: kernel(q, k, v), mqa), _sa_inputs(mqa)

    def _ref_sa_bwd(q, k, v, mqa=_mqa):
        return _sa_grad(_sa_reference("causal", mqa, None), mqa)(q, k, v)

    case(f"splash bwd {'mqa' if _mqa else 'mha'} mask=causal", reference=_ref_sa_bwd, atol=2e-4, rtol=2e-4, slow=True)(
        _build_sa_bwd
    )


# paged attention -----------------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import paged_attention as pa  # noqa: E402
from jax.experimental.pallas.ops.tpu.paged_attention import quantization_utils as pa_q  # noqa: E402


def _paged_inputs(batch=2, q_heads=4, kv_heads=2, head_dim=128, page_size=16, pages=16, pages_per_seq=4):
    q = _rand(20, (batch, q_heads, head_dim))
    k_pages = _rand(21, (kv_heads, pages, page_size, head_dim))
    v_pages = _rand(22, (kv_heads, pages, page_size, head_dim))
    lengths = jnp.array([37, 61][:batch], jnp.int32)
    page_indices = jnp.asarray(
        np.random.default_rng(1).permutation(pages)[: batch * pages_per_seq].reshape(batch, pages_per_seq), jnp.int32
    )
    return q, k_pages, v_pages, lengths, page_indices


def _paged_reference(q, k_pages, v_pages, lengths, page_indices):
    """Plain jnp decode attention over the gathered pages (the op has no reference)."""
    if isinstance(k_pages, pa_q.QuantizedTensor):
        k_pages = pa_q.unquantize_from_int8(k_pages, jnp.float32)
        v_pages = pa_q.unquantize_from_int8(v_pages, jnp.float32)
    kv_heads, _, page_size, d = k_pages.shape
    b, qh, _ = q.shape
    k = k_pages[:, page_indices].reshape(kv_heads, b, -1, d)  # (kvh, b, s, d)
    v = v_pages[:, page_indices].reshape(kv_heads, b, -1, d)
    qg = q.reshape(b, kv_heads, qh // kv_heads, d)
    logits = jnp.einsum("bhgd,hbsd->bhgs", qg, k)
    valid = jnp.arange(k.shape[2])[None, :] < lengths[:, None]
    logits = jnp.where(valid[:, None, None, :], logits, -jnp.inf)
    out = jnp.einsum("bhgs,hbsd->bhgd", jax.nn.softmax(logits, axis=-1), v)
    return out.reshape(b, qh, d)


# megacore_mode="kv_head" / "batch": not in the corpus (the op has no reference, and
# run by one core the kernel deadlocks -- stock hangs); test_production_findings.py
# has them: the reported deadlock on one core, two cores equal to megacore_mode=None.
for _int8, _inline in [(False, True), (True, True), (False, False)]:

    def _build_pa(int8=_int8, inline=_inline):
        q, k, v, lengths, idx = _paged_inputs()
        if int8:
            k, v = pa_q.quantize_to_int8(k), pa_q.quantize_to_int8(v)
        fn = jax.jit(
            lambda q, k, v, lengths, idx: pa.paged_attention(
                q, k, v, lengths, idx, pages_per_compute_block=2, inline_seq_dim=inline
            )
        )
        return fn, (q, k, v, lengths, idx)

    case(f"paged_attention int8={_int8} inline_seq_dim={_inline}", dma_modes=MODES)(_build_pa)


# ragged paged attention ----------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import ragged_paged_attention as rpa  # noqa: E402


def _ragged_inputs():
    page_size, pages, kv_heads, q_heads, d = 16, 16, 2, 4, 128
    q_lens = [5, 1, 10]
    kv_lens = [21, 9, 40]
    tokens = 16
    q = _rand(30, (tokens, q_heads, d))
    kv_pages = _rand(31, (pages, page_size, 2 * kv_heads, d))
    max_seqs, pages_per_seq = 4, 4
    page_indices = np.zeros((max_seqs, pages_per_seq), np.int32)
    page_indices[:3] = np.random.default_rng(2).permutation(pages)[:12].reshape(3, 4)
    cu = np.zeros(max_seqs + 1, np.int32)
    cu[1:4] = np.cumsum(q_lens)
    cu[4:] = cu[3]
    lens = np.zeros(max_seqs, np.int32)
    lens[:3] = kv_lens
    return (q, kv_pages, jnp.asarray(lens), jnp.asarray(page_indices), jnp.asarray(cu), jnp.array([3], jnp.int32))


def _ragged_valid(out, cu):
    return out[: int(np.asarray(cu)[-1])]


for _window, _cap in [(None, None), (8, 20.0)]:

    def _build_rpa(window=_window, cap=_cap):
        fn = jax.jit(
            lambda *a: rpa.ragged_paged_attention(
                *a, sm_scale=0.1, sliding_window=window, soft_cap=cap, num_kv_pages_per_block=2, num_queries_per_block=8
            )
        )
        return fn, _ragged_inputs()

    def _ref_rpa(*a, window=_window, cap=_cap):
        return rpa.ref_ragged_paged_attention(*a, sm_scale=0.1, sliding_window=window, soft_cap=cap)

    case(
        f"ragged_paged_attention sliding_window={_window} soft_cap={_cap}",
        reference=_ref_rpa,
        atol=1e-4,
        rtol=1e-4,
        dma_modes=MODES,
        stock="stock interpret mode fails on this kernel (a CpuCallback error)",
    )(_build_rpa)


# megablox gmm / tgmm --------------------------------------------------------------------

import importlib  # noqa: E402

from jax.experimental.pallas.ops.tpu import megablox  # noqa: E402

gmm_lib = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")

_GROUPS = jnp.array([64, 96, 0, 96], jnp.int32)  # sums to m = 256


def _group_mask(m):
    ends = jnp.cumsum(_GROUPS)
    starts = ends - _GROUPS
    rows = jnp.arange(m)
    return (rows[None, :] >= starts[:, None]) & (rows[None, :] < ends[:, None])  # (g, m)


def _gmm_ref(lhs, rhs, group_sizes):
    per_group = jnp.einsum("mk,gkn->gmn", lhs, rhs)
    return jnp.einsum("gm,gmn->mn", _group_mask(lhs.shape[0]).astype(lhs.dtype), per_group)


def _tgmm_ref(lhs, rhs, group_sizes):  # lhs (k, m), rhs (m, n) -> (g, k, n)
    mask = _group_mask(lhs.shape[1]).astype(lhs.dtype)
    return jnp.einsum("km,gm,mn->gkn", lhs, mask, rhs)


@case("megablox gmm", reference=_gmm_ref, atol=1e-3, rtol=1e-4)
def _build_gmm():
    fn = jax.jit(lambda lhs, rhs, g: megablox.gmm(lhs, rhs, g, tiling=(128, 128, 128)))
    return fn, (_rand(40, (256, 128)), _rand(41, (4, 128, 128)), _GROUPS)


@case("megablox tgmm", reference=_tgmm_ref, atol=1e-3, rtol=1e-4)
def _build_tgmm():
    fn = jax.jit(lambda lhs, rhs, g: gmm_lib.tgmm(lhs, rhs, g, tiling=(128, 128, 128)))
    return fn, (_rand(42, (128, 256)), _rand(43, (256, 128)), _GROUPS)


def _gmm_vjp(op):
    def f(lhs, rhs, g):
        out, pull = jax.vjp(lambda lhs, rhs: op(lhs, rhs, g), lhs, rhs)
        return pull(jnp.cos(out))

    return jax.jit(f)


@case(
    "megablox gmm vjp", reference=lambda lhs, rhs, g: _gmm_vjp(_gmm_ref)(lhs, rhs, g), atol=1e-3, rtol=1e-4, slow=True
)
def _build_gmm_vjp():
    return (
        _gmm_vjp(lambda lhs, rhs, g: megablox.gmm(lhs, rhs, g, tiling=(128, 128, 128))),
        (_rand(44, (256, 128)), _rand(45, (4, 128, 128)), _GROUPS),
    )


# all_gather ----------------------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import all_gather as ag  # noqa: E402


def _mesh(shape, names):
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


def _ag_input(dtype, rows=8):
    x = jnp.arange(4 * rows * 128).reshape(4 * rows, 128)
    return (x.astype(jnp.float32) * 0.5).astype(dtype)


for _dims, _space, _dtype in [(1, "vmem", "float32"), (1, "any", "int32"), (2, "vmem", "float32"), (2, "any", "int32")]:

    def _build_ag(dims=_dims, space=_space, dtype=_dtype):
        mesh = _mesh((4,), ("x",)) if dims == 1 else _mesh((2, 2), ("x", "y"))
        memory_space = pltpu.VMEM if space == "vmem" else pl.ANY
        fn = functools.partial(ag.all_gather, mesh=mesh, axis_name="x", memory_space=memory_space)
        return fn, (_ag_input(getattr(jnp, dtype)),)

    def _ref_ag(x, dims=_dims):
        # The op's out_specs is P(None): every device holds the gather over "x"
        # of its shards; on the 2-D mesh x is split over "x" only, so that is x.
        return x

    # On a 1-D mesh the kernel races in on_wait mode (a device may forward a
    # chunk before it has arrived; stock's on_wait output is wrong the same
    # way): see test_production_findings.py. Eager mode is race-free and exact.
    case(
        f"all_gather {_dims}-D mesh {_space} {_dtype}",
        reference=_ref_ag,
        atol=0,
        rtol=0,
        dma_modes=MODES if _dims == 2 else ("eager",),
        devices=4,
        stock=("stock interpret mode may hang on all_gather over a 1-D mesh (jax 0.10.2)" if _dims == 1 else None),
    )(_build_ag)


# matmul --------------------------------------------------------------------------------

from jax.experimental.pallas.ops.tpu import matmul as mm  # noqa: E402

for _dt in ("float32", "bfloat16"):

    def _build_mm(dt=_dt):
        x, y = _rand(50, (256, 256), getattr(jnp, dt)), _rand(51, (256, 256), getattr(jnp, dt))
        return functools.partial(mm.matmul, block_shape=(128, 128), block_k=128), (x, y)

    case(
        f"matmul {_dt}",
        reference=lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32).astype(x.dtype),
        atol=1e-2 if _dt == "bfloat16" else 1e-3,
        rtol=1e-2 if _dt == "bfloat16" else 1e-5,
    )(_build_mm)


# PRNG: the ops' threefry / philox count kernels and the jax.random impls over them --------

from jax.experimental.pallas.ops.tpu.random import philox, threefry  # noqa: E402


def _threefry_key():
    return jax.random.key_data(jax.random.key(42, impl="threefry2x32"))


def _jax_threefry_bits(shape):
    with jax.threefry_partitionable(True):
        return jax.random.bits(jax.random.key(42, impl="threefry2x32"), shape, jnp.uint32)


@case("threefry_2x32_count", reference=lambda key: _jax_threefry_bits((16, 256)), atol=0, rtol=0)
def _build_threefry_count():
    fn = jax.jit(lambda key: threefry.threefry_2x32_count(key, (16, 256), (16, 256), block_size=(8, 128)))
    return fn, (_threefry_key(),)


_STOCK_PRNG = "stock interpret mode fails lowering random_bits_p over a pallas_call (KeyError on an OrderedIOEffect)"


def _build_pl_random(sampler, impl):
    def fn(seed):
        key = jax.random.key(seed, impl=impl)
        if sampler == "bits":
            return jax.random.bits(key, (8, 256), jnp.uint32)
        return getattr(jax.random, sampler)(key, (8, 256))

    return jax.jit(fn), (jnp.uint32(7),)


def _ref_threefry_random(seed, sampler):
    with jax.threefry_partitionable(True):
        key = jax.random.key(seed, impl="threefry2x32")
        if sampler == "bits":
            return jax.random.bits(key, (8, 256), jnp.uint32)
        return getattr(jax.random, sampler)(key, (8, 256))


def _ref_philox_bits(seed):
    """The same bits from the op's kernel called directly, on stock (which runs it)."""
    data = jax.random.key_data(jax.random.key(seed, impl="pallas_philox4x32"))
    with _stock():
        return np.asarray(jax.jit(lambda d: philox.philox_random_bits(d, 32, (8, 256)))(data))


def _stats(sampler):
    def check(out, seed):
        out = np.asarray(out, np.float64)
        assert np.isfinite(out).all() and len(np.unique(out)) > out.size // 2
        if sampler == "uniform":
            assert out.min() >= 0 and out.max() < 1 and abs(out.mean() - 0.5) < 0.03
        else:
            assert abs(out.mean()) < 0.06 and abs(out.std() - 1) < 0.06

    return check


for _sampler in ("bits", "uniform", "normal"):
    case(
        f"jax.random.{_sampler} impl=pallas_threefry2x32",
        stock=_STOCK_PRNG,
        reference=functools.partial(_ref_threefry_random, sampler=_sampler),
        atol=1e-6,
        rtol=1e-6,
    )(functools.partial(_build_pl_random, _sampler, "pallas_threefry2x32"))
    case(
        f"jax.random.{_sampler} impl=pallas_philox4x32",
        stock=_STOCK_PRNG,
        reference=_ref_philox_bits if _sampler == "bits" else None,
        atol=0,
        rtol=0,
        check=None if _sampler == "bits" else _stats(_sampler),
    )(functools.partial(_build_pl_random, _sampler, "pallas_philox4x32"))


@case("philox_4x32_count")
def _build_philox_count():
    fn = jax.jit(lambda key: philox.philox_4x32_count(key, (16, 256), offset=3))
    return fn, (_threefry_key(),)
