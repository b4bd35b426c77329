"""Single ops of the FFI layer: lowering, memory ops, run ids, bad input."""

from __future__ import annotations

import ast
import pathlib

import ffi_support
import jax
import jax.numpy as jnp
import mosaic_rt.ffi as F
import mosaic_rt.ffi.ops as ffi_ops
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, on_devices, with_token
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from mosaic_rt import _native

pytestmark = pytest.mark.timeout(120)


def translated(n, body, *args):
    fn, placed = on_devices(n, body, *(args or (dummy_rows(n),)))
    with F.native_errors():
        return jax.tree.map(np.asarray, fn(*placed))


def test_every_target_is_registered_once():
    assert set(F.TARGETS) == set(_native.ffi_targets())
    assert all(t.startswith("mosaic_rt_") for t in F.TARGETS)
    assert len(F.TARGETS) == len(set(F.TARGETS))
    for op in (
        "kernel_begin",
        "kernel_end",
        "load",
        "store",
        "swap",
        "dma_start",
        "dma_wait",
        "semaphore_signal",
        "semaphore_wait",
        "copy_block",
        "check_revisit",
        "prng_random_bits",
    ):
        assert f"mosaic_rt_{op}" in F.TARGETS


def test_every_target_has_one_public_typed_wrapper():
    for target in _native.ffi_targets():
        op = target.removeprefix("mosaic_rt_")
        wrapper = getattr(ffi_ops, op, None)
        assert callable(wrapper), f"no wrapper mosaic_rt.ffi.ops.{op} for {target}"
        assert wrapper.__doc__, f"mosaic_rt.ffi.ops.{op} has no docstring"


_FFI_OPS = pathlib.Path(ffi_ops.__file__)
_FFI_EMIT = _FFI_OPS.with_name("emit.py")  # mosaic_rt.ffi.emit: binds ffi_call
_OPS_MODULE = "mosaic_rt.ffi.ops"
_OPS_MODULES = (_OPS_MODULE, "mosaic_rt.ffi.emit")


def _native_call_offences(source: str, name: str, package: tuple[str, ...]) -> list[str]:
    """Places in the source of module `name` of `package` that emit a native
    op other than through a public wrapper of ffi/ops.py: `ffi_call`, a
    target's name, a private helper of ffi/ops.py or ffi/emit.py (`_call`,
    `_region_parts`, ...)."""
    targets = set(_native.ffi_targets())
    tree = ast.parse(source, name)
    aliases = set()  # names bound to the modules mosaic_rt.ffi.ops / .emit
    found = []

    def offence(node, what):
        found.append(f"{name}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        module = node.module if isinstance(node, ast.ImportFrom) else None
        if module is not None or getattr(node, "level", 0):
            if node.level:  # relative: resolved against the file's package
                module = ".".join(package[: len(package) - node.level + 1] + ((module,) if module else ()))
        if module in _OPS_MODULES:
            for a in node.names:
                if a.name.startswith("_"):
                    offence(node, f"imports private {a.name} of {module}")
        elif module == "mosaic_rt.ffi":
            aliases.update(a.asname or a.name for a in node.names if a.name in ("ops", "emit"))
        elif isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name in _OPS_MODULES and a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr == "ffi_call":
                offence(node, "calls jax.ffi.ffi_call")
            base = node.value
            is_ops = (isinstance(base, ast.Name) and base.id in aliases) or (
                isinstance(base, ast.Attribute) and base.attr in ("ops", "emit")
            )
            if is_ops and node.attr.startswith("_") and not node.attr.startswith("__"):
                offence(node, f"uses private {node.attr} of {_OPS_MODULE} / emit")
        elif isinstance(node, ast.Name) and node.id == "ffi_call":
            offence(node, "calls ffi_call")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in targets or any(t in node.value for t in targets):
                offence(node, f"names native target {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and str(head.value).startswith("mosaic_rt_"):
                offence(node, "builds a native target name")
    return found


def test_only_ffi_ops_emits_native_calls():
    """ffi/ops.py's promise: one typed wrapper per native op, and every
    native op of the package goes through its wrapper (the FFI encoding --
    operands, attributes, regions -- has one home: ffi/emit.py binds the
    call, ffi/ops.py's wrappers name what goes in it)."""
    root = _FFI_OPS.parent.parent.parent
    offenders = []
    for path in sorted((root / "mosaic_rt").rglob("*.py")):
        if path not in (_FFI_OPS, _FFI_EMIT):
            rel = path.relative_to(root)
            offenders += _native_call_offences(path.read_text(), str(rel), rel.parent.parts)
    assert not offenders, "native ops emitted outside mosaic_rt/ffi/{ops,emit}.py:\n" + "\n".join(offenders)


def test_the_native_call_scan_finds_each_kind_of_offence():
    source = (
        "import jax\n"
        "from .ops import _call\n"
        "from mosaic_rt.ffi import ops as fo\n"
        "a = fo._region_parts(None)\n"
        "b = jax.ffi.ffi_call('mosaic_rt_copy_block', ())\n"
        "c = f'mosaic_rt_{a}'\n"
    )
    found = _native_call_offences(source, "bad.py", ("mosaic_rt", "ffi"))
    kinds = sorted(o.split(": ", 1)[1].split(" ")[0] for o in found)
    assert kinds == ["builds", "calls", "imports", "names", "uses"], kinds


def test_lowered_hlo_has_our_custom_calls_and_no_python_callback():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            k.token = F.semaphore_signal(k.token, k.handle, d, 0, s, 1, target_device=1 - d)
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, 1)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    fn, args = on_devices(2, body, dummy_rows(2))
    text = fn.lower(*args).as_text()
    for name in ("kernel_begin", "allocate_semaphores", "semaphore_signal", "semaphore_wait", "kernel_end"):
        assert f"mosaic_rt_{name}" in text
    assert "callback" not in text.lower()
    # The token is aliased: every op is ordered after the previous one.
    assert "output_operand_alias" in text


def test_run_id_is_shared_by_devices_and_changes_between_executions():
    def body(d, _):
        t, info = F.launch_info(F.new_token())
        return with_token(info[None], t)

    fn, args = on_devices(8, body, dummy_rows(8))
    a, b = np.asarray(fn(*args)), np.asarray(fn(*args))
    assert len({tuple(r) for r in a[:, :2]}) == 1
    assert len({tuple(r) for r in b[:, :2]}) == 1
    assert tuple(a[0, :2]) != tuple(b[0, :2])
    np.testing.assert_array_equal(a[:, 2], np.arange(8))  # XLA device ordinals


def test_allocate_load_store_swap_free():
    uid = fresh_uid()
    x = np.arange(24, dtype=np.float32).reshape(4, 6)

    def body(d, xin):
        with begin(d, 1, uid=uid) as k:
            h, t = k.handle, k.token
            t, b = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=np.float32, shape=(4, 6), init=xin)
            # rows 1..2, every other column from 1: a (2, 3) window
            win = F.TracedRegion.slices((1, 2), (1, 3, 2))
            t, got = F.load(t, h, d, 0, b, win, space="vmem", shape=(2, 3), dtype=np.float32)
            t = F.store(t, h, d, 0, b, win, -got, space="vmem")
            mask = jnp.array([True, False, True, False, True, False])
            t, old = F.swap(t, h, d, 0, b, F.TracedRegion.index(3), jnp.full((6,), 7.0), mask, space="vmem")
            t, whole = F.load(t, h, d, 0, b, None, space="vmem", shape=(4, 6), dtype=np.float32)
            t = F.free_buffer(t, h, d, 0, b, space="vmem")
            k.token = t
        return with_token(got, k.token), old, whole

    got, old, whole = translated(1, body, x)
    np.testing.assert_array_equal(got, x[1:3, 1:6:2])
    expect = x.copy()
    expect[1:3, 1:6:2] *= -1
    np.testing.assert_array_equal(old, np.where(mask_np := np.array([1, 0] * 3, bool), x[3], 7.0))
    expect[3][mask_np] = 7.0
    np.testing.assert_array_equal(whole, expect)


def test_fill_value_and_dynamic_starts():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, uninitialized_memory="zero") as k:
            h, t = k.handle, k.token
            t, b = F.allocate_buffer(t, h, d, 0, space="smem", dtype=np.int32, shape=(8,))

            def put(i, tok):
                return F.store(tok, h, d, 0, b, F.TracedRegion.index(i), i * i, space="smem")

            t = jax.lax.fori_loop(2, 6, put, t)
            t, v = F.load(t, h, d, 0, b, None, space="smem", shape=(8,), dtype=np.int32)
            k.token = t
        return with_token(v, k.token)

    np.testing.assert_array_equal(translated(1, body), [0, 0, 4, 9, 16, 25, 0, 0])


def test_out_of_bounds_load_is_an_index_error():
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, out_of_bounds_reads="raise") as k:
            h, t = k.handle, k.token
            t, b = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=np.int32, shape=(4,))
            t, v = F.load(t, h, d, 0, b, F.TracedRegion.slices((3, 2)), space="vmem", shape=(2,), dtype=np.int32)
            k.token = t
        return with_token(v[:1], k.token)

    with pytest.raises(IndexError):
        translated(1, body)


# ------------------------------------------------------------------ bad input


def _raw_call(name, operands, results=(), **attrs):
    i32 = jax.ShapeDtypeStruct((), jnp.int32)
    call = jax.ffi.ffi_call(name, (i32, *results), has_side_effect=True, input_output_aliases={0: 0})
    out = call(*operands, **attrs)
    return out[0] if not results else out


def _bad_launch(make_op, n=1):
    """Runs one op (built by ``make_op(d, k)``) inside a healthy launch."""
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid, wait_timeout=2) as k:
            k.token = make_op(d, k)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    return translated(n, body)


def _i32(x):
    return jnp.asarray(x, jnp.int32)


@pytest.mark.parametrize(
    "case,pattern",
    [
        ("float_sem", r"operand 4 must be int32, got float32"),
        ("vector_inc", r"operand 5 must have rank 0"),
        ("short_handle", r"launch handle \(operand 1\) must be uint32\[2\]"),
        ("arity", r"expected 8 operand\(s\) and 1 result\(s\), got 7 and 1"),
        ("unknown_handle", r"unknown kernel launch handle"),
        ("negative_core", r"core id must be >= 0"),
    ],
)
def test_bad_operands_are_value_errors(case, pattern):
    def make_op(d, k):
        ops = [k.token, k.handle, _i32(d), _i32(0), _i32(2000), _i32(1), _i32(-1), _i32(-1)]
        if case == "float_sem":
            ops[4] = jnp.float32(2000)
        elif case == "vector_inc":
            ops[5] = jnp.ones((2,), jnp.int32)
        elif case == "short_handle":
            ops[1] = k.handle[:1]
        elif case == "arity":
            ops = ops[:7]
        elif case == "unknown_handle":
            ops[1] = jnp.array([12345, 678], jnp.uint32)
        elif case == "negative_core":
            ops[3] = _i32(-3)
        return _raw_call("mosaic_rt_semaphore_signal", ops)

    with pytest.raises(ValueError, match=pattern):
        _bad_launch(make_op)


def test_unknown_semaphore_is_a_value_error():
    with pytest.raises(ValueError, match="31337"):
        _bad_launch(lambda d, k: F.semaphore_signal(k.token, k.handle, d, 0, 31337, 1))


def test_out_of_range_target_device_is_a_value_error():
    def make_op(d, k):
        t, s = F.allocate_semaphores(k.token, k.handle, d, 0)
        return F.semaphore_signal(t, k.handle, d, 0, s, 1, target_device=5)

    with pytest.raises(ValueError, match=r"device id 5 out of range: the kernel runs on 2 device"):
        _bad_launch(make_op, n=2)


def test_out_of_range_own_device_is_a_value_error():
    def body(d, _):
        with ffi_support.kernel(F.new_token(), d + 3, uid=fresh_uid(), num_devices=2) as k:
            pass
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    with pytest.raises(ValueError, match=r"device id [34] out of range"):
        translated(2, body)


@pytest.mark.parametrize(
    "attrs,pattern",
    [
        (dict(dma_execution_mode="sometimes"), "dma_execution_mode must be 'eager', 'on_wait' or 'tpu'"),
        (dict(out_of_bounds_reads="ignore"), "out_of_bounds_reads must be"),
        (dict(num_cores=0), "at least one device and one core"),
    ],
)
def test_bad_kernel_config_is_a_value_error(attrs, pattern):
    def body(d, _):
        with ffi_support.kernel(F.new_token(), d, uid=fresh_uid(), num_devices=1, **attrs) as k:
            pass
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    with pytest.raises(ValueError, match=pattern):
        translated(1, body)


def test_missing_and_mistyped_attributes_are_value_errors():
    def missing(d, k):
        return _raw_call("mosaic_rt_dma_wait", [k.token, k.handle, _i32(d), _i32(0), _i32(2000)])

    with pytest.raises(ValueError, match=r'missing attribute "bytes"'):
        _bad_launch(missing)

    def mistyped(d, k):
        return _raw_call("mosaic_rt_dma_wait", [k.token, k.handle, _i32(d), _i32(0), _i32(2000)], bytes="many")

    with pytest.raises(ValueError, match=r'attribute "bytes" must be an integer'):
        _bad_launch(mistyped)


def test_wrong_init_dtype_and_bad_space_are_value_errors():
    def bad_init(d, k):
        ops = [k.token, k.handle, _i32(d), _i32(0), jnp.zeros((4,), jnp.float32)]
        return _raw_call(
            "mosaic_rt_allocate_buffer",
            ops,
            (jax.ShapeDtypeStruct((), jnp.int32),),
            space=0,
            dtype="int32",
            shape=np.array([4], np.int64),
        )[0]

    with pytest.raises(ValueError, match="operand 4 must be int32, got float32"):
        _bad_launch(bad_init)

    def bad_space(d, k):
        ops = [k.token, k.handle, _i32(d), _i32(0)]
        return _raw_call(
            "mosaic_rt_allocate_buffer",
            ops,
            (jax.ShapeDtypeStruct((), jnp.int32),),
            space=42,
            dtype="int32",
            shape=np.array([4], np.int64),
        )[0]

    with pytest.raises(ValueError, match="unknown memory space code 42"):
        _bad_launch(bad_space)


def test_dma_descriptor_invariant_is_checked_at_trace_time():
    with pytest.raises(ValueError, match=r"Either both or neither `src_sem` and `device_id` can be set\."):
        F.dma_start(
            F.new_token(),
            jnp.zeros((2,), jnp.uint32),
            0,
            0,
            F.DmaStart(F.DmaSide("vmem", 100), F.DmaSide("vmem", 101), 2000, src_sem=2001),
        )


def test_device_ordinals_catch_a_device_id_that_does_not_match_the_mesh():
    n = 4
    devices = jax.devices()[:n][::-1]  # logical device 0 runs on XLA device 3
    mesh = jax.make_mesh((n,), ("x",), devices=devices)
    ids = [d.id for d in mesh.devices.flat]

    def run(ordinals):
        uid = fresh_uid()

        def body(z):
            d = jax.lax.axis_index("x")
            with ffi_support.kernel(F.new_token(), d, uid=uid, num_devices=n, device_ordinals=ordinals) as k:
                pass
            return z + k.token

        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        z = jax.device_put(jnp.zeros((n,), jnp.int32), NamedSharding(mesh, P("x")))
        with F.native_errors():
            return np.asarray(fn(z))

    np.testing.assert_array_equal(run(ids), np.zeros(n))
    with pytest.raises(ValueError, match=r"logical device \d runs on XLA device \d, but the mesh"):
        run(list(range(n)))


@pytest.mark.timeout(600)
def test_a_device_ordinal_mismatch_on_one_device_fails_the_whole_launch():
    """Device 0 joins correctly and waits in a barrier; device 1's mismatch
    must end that wait at once (not after the 300 s timeout)."""
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid, wait_timeout=300, device_ordinals=[0, 5]) as k:
            k.token = F.device_barrier(k.token, k.handle, d)
        return with_token(jnp.zeros((1,), jnp.int32), k.token)

    import time

    t0 = time.monotonic()
    with pytest.raises(
        ValueError, match="logical device 1 runs on XLA device 1, but the mesh places it on XLA device 5"
    ):
        translated(2, body)
    # Compiling and running take seconds; the timeout would take minutes.
    assert time.monotonic() - t0 < 150, "the barrier wait was not ended by the mismatch"


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_local_dma_between_strided_regions(mode):
    uid = fresh_uid()
    x = np.arange(32, dtype=np.int32).reshape(4, 8)

    def body(d, xin):
        with begin(d, 1, uid=uid, dma_execution_mode=mode) as k:
            h, t = k.handle, k.token
            t, src = F.allocate_buffer(t, h, d, 0, space="hbm", dtype=np.int32, shape=(4, 8), init=xin)
            t, dst = F.allocate_buffer(
                t, h, d, 0, space="vmem", dtype=np.int32, shape=(2, 4), init=jnp.zeros((2, 4), jnp.int32)
            )
            t, sem = F.allocate_semaphores(t, h, d, 0, kind="dma")
            # rows 0 and 2, columns 1, 3, 5, 7 -> the whole (2, 4) destination
            t = F.dma_start(
                t,
                h,
                d,
                0,
                F.DmaStart(
                    F.DmaSide("hbm", src, F.TracedRegion.slices((0, 2, 2), (1, 4, 2))), F.DmaSide("vmem", dst), sem
                ),
            )
            t, before = F.semaphore_read(t, h, d, 0, sem)
            t = F.dma_wait(t, h, d, 0, F.DmaWait(sem, 2 * 4 * 4))
            t, got = F.load(t, h, d, 0, dst, None, space="vmem", shape=(2, 4), dtype=np.int32)
            t, leaks = F.leak_report(t, h, d, policy="raise")
            k.token = t
        return with_token(got, k.token), before[None]

    got, before = translated(1, body, x)
    np.testing.assert_array_equal(got, x[0:4:2, 1:8:2])
    # eager copies at start (the bytes are already counted); on_wait copies in the wait
    assert before[0] == (32 if mode == "eager" else 0)
