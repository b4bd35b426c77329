"""The ops' wire contract holds across the two languages: the native side
states each op's layout once (rust/ffi/src/wire.rs, exported as
`_native.OP_LAYOUTS`; its handlers read positions from it, see the unit
tests there), and every wrapper of mosaic_rt/ffi/ops.py emits exactly what
it states -- checked here on the traced calls (operand counts, attribute
names) of every wrapper, in its plain and its optional forms.

(`mosaic_rt.ffi.emit` also checks every call it emits against the layout,
so the whole test suite exercises the contract on real kernels.)
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mosaic_rt import _native
from mosaic_rt.ffi import emit
from mosaic_rt.ffi import ops as F

_H = jnp.zeros((2,), jnp.uint32)
_VMEM = _native.MEMORY_SPACES["vmem"]
_ANY = max(_native.MEMORY_SPACES.values())  # any code the wrappers pass on
_BLOCK = F.GridBlock(
    output=False, space=_VMEM, hbm_id=0, kernel_id=1, sizes=(8,), squeezed=(False,), factors=(8,), name="x"
)
_GRID = dict(grid=(2,), order=[()], iters_per_core=2, num_iterations=2, blocks=[_BLOCK], revisit=[-1])


def _calls(fn, *args):
    """The `ffi_call`s ``fn(token, *args)`` traces: (target, operand count,
    attribute names)."""
    jaxpr = jax.make_jaxpr(fn)(jnp.int32(0), *args)
    return [
        (e.params["target_name"], len(e.invars), {k for k, _ in e.params["attributes"]})
        for e in jaxpr.jaxpr.eqns
        if e.primitive.name == "ffi_call"
    ]


def _uses(t, s):
    """One use of every wrapper, most in a plain and an optional-heavy form
    (``s``: a traced int32 scalar)."""
    r = F.TracedRegion
    dyn = r(sizes=(1, 1), strides=(1, 1), squeezed=(True, True), starts=(s, s))
    mixed = r.slices((0, 2), (s, 4))
    full = F.LaunchConfig(
        device_ordinals=[0],
        device_processes=[0],
        detect_races=True,
        on_race="warn",
        detect_deadlocks=False,
        deadlock_idle_ms=5,
        detect_uninitialized=True,
        trace_path="/tmp/t",
        python_warnings=False,
    )
    F.kernel_begin(t, 0, uid=1, config=F.LaunchConfig())
    F.kernel_begin(t, 0, uid=1, config=full, site=3)
    F.launch_begin(t, 0, uid=1, config=F.LaunchConfig())
    F.launch_begin(
        t,
        0,
        uid=1,
        config=F.LaunchConfig(),
        barrier=True,
        site=2,
        allocations=[
            F.LaunchBuffer(_ANY, jnp.float32, (8,), init=jnp.zeros(8)),
            F.LaunchBuffer(_VMEM, jnp.float32, (8,), logical_shape=(8,)),
            F.LaunchSemaphores((2,)),
        ],
        grid=dict(_GRID, grid=(s,)),
    )
    F.launch_begin(t, 0, uid=1, config=full, grid=_GRID)
    F.kernel_end(t, _H, 0)
    F.kernel_end(t, _H, 0, keep_alive=[jnp.zeros(4)], outputs=[jnp.zeros(4)], leak_policy="warn", site=1)
    F.leak_report(t, _H, 0, site=1)
    F.pending_reports(t)
    F.core_end(t, _H, 0, 0, site=1)
    F.device_barrier(t, _H, 0, site=1)
    F.sync_device_cores(t, _H, 0, site=1)
    F.launch_info(t)
    F.allocate_buffer(t, _H, 0, 0, space=_VMEM, dtype=jnp.float32, shape=(8,))
    F.allocate_buffer(
        t,
        _H,
        0,
        None,
        space=_VMEM,
        dtype=jnp.float32,
        shape=(8,),
        logical_shape=(8,),
        init=jnp.zeros(8),
        borrow=True,
        site=1,
    )
    F.allocate_buffer(t, _H, 0, None, space=_ANY, dtype=jnp.float32, shape=(8,), direct=True)
    F.free_buffer(t, _H, 0, 0, 1, space=_VMEM, site=1)
    F.load(t, _H, 0, 0, 1, None, space=_VMEM, shape=(8,), dtype=jnp.float32)
    F.load(t, _H, 0, 0, 1, dyn, space=_VMEM, shape=(), dtype=jnp.float32, mask=jnp.ones((), bool), site=1)
    F.load(t, _H, 0, 0, 1, mixed, space=_VMEM, shape=(2, 4), dtype=jnp.float32)
    F.store(t, _H, 0, 0, 1, mixed, jnp.zeros((2, 4)), space=_VMEM, site=1)
    F.store(t, _H, 0, 0, 1, dyn, jnp.zeros(()), space=_VMEM)
    F.swap(t, _H, 0, 0, 1, None, jnp.zeros(8), space=_VMEM)
    F.swap(t, _H, 0, 0, 1, dyn, jnp.zeros(()), jnp.ones((), bool), space=_VMEM, old=False)
    F.fill(t, _H, 0, 0, 1, mixed, jnp.float32(0), space=_VMEM, old_shape=(2, 4), site=1)
    F.allocate_semaphores(t, _H, 0, None, kind="dma", count=2, site=1)
    F.barrier_semaphore(t, _H, 0, collective_id=0, site=1)
    F.semaphore_signal(t, _H, 0, 0, 1, 1)
    F.semaphore_signal(t, _H, 0, 0, 1, s, target_device=s, target_core=0, wrap_negative=True, site=1)
    F.semaphore_wait(t, _H, 0, 0, 1, 1)
    F.semaphore_wait(t, _H, 0, 0, 1, s, decrement=False, site=1)
    F.semaphore_read(t, _H, 0, 0, 1, site=1)
    F.semaphore_read(t, _H, 0, 0, 1, take=True)
    F.dma_start(t, _H, 0, 0, F.DmaStart(F.DmaSide(_VMEM, 1), F.DmaSide(_VMEM, 2), 3))
    F.dma_start(
        t,
        _H,
        0,
        0,
        F.DmaStart(
            F.DmaSide(_VMEM, 1, dyn),
            F.DmaSide(_ANY, 2, mixed),
            3,
            src_sem=4,
            dst_device=s,
            dst_core=0,
            then_wait=[(3, 16, 1), (4, 16, 2)],
            site=1,
        ),
    )
    F.dma_start(t, _H, 0, 0, F.DmaStart(F.DmaSide(_VMEM, 1, mixed), F.DmaSide(_VMEM, 2, dyn), 3))
    # Through ref views: byte maps after everything else.
    view_map = np.arange(8, dtype=np.int32)
    F.dma_start(t, _H, 0, 0, F.DmaStart(F.DmaSide(_VMEM, 1, mixed, view_map), F.DmaSide(_VMEM, 2), 3))
    F.dma_start(t, _H, 0, 0, F.DmaStart(F.DmaSide(_VMEM, 1, None, view_map), F.DmaSide(_VMEM, 2, None, view_map), 3))
    # ... in sub-byte units (int4 views): their layouts an attribute.
    nibbles = F.UnitMap(view_map, unit=4, region=4, view=8)
    F.dma_start(t, _H, 0, 0, F.DmaStart(F.DmaSide(_VMEM, 1, None, nibbles), F.DmaSide(_VMEM, 2, None, view_map), 3))
    F.dma_wait(t, _H, 0, 0, F.DmaWait(3, 16))
    F.dma_wait(t, _H, 0, 0, F.DmaWait(3, 16, then_wait=[(4, 16, 2)], site=1))
    F.copy_block(
        t,
        _H,
        0,
        0,
        1,
        mixed,
        2,
        None,
        src_space=_ANY,
        dst_space=_VMEM,
        direction="input",
        name="x",
        block_indices=(0, s),
        grid_point=(0, 1),
        site=1,
    )
    F.copy_block(
        t,
        _H,
        0,
        0,
        1,
        None,
        2,
        mixed,
        src_space=_VMEM,
        dst_space=_ANY,
        direction="output",
        name="x",
        block_indices=(0,),
        grid_point=(0,),
    )
    F.check_revisit(t, _H, 0, 0, (0, s), [mixed, None], site=1)
    F.grid_begin(t, _H, 0, 0, **_GRID)
    F.grid_begin(t, _H, 0, 0, **dict(_GRID, grid=(s,)), site=1)
    F.grid_copy_in(t, _H, 0, 0, [0], site=1)
    F.grid_copy_out(t, _H, 0, 0, [0], [1], ndim=1, site=1)
    F.prng_seed(t, _H, 0, 0, (1, s))
    F.prng_random_bits(t, _H, 0, 0, shape=(4,), dtype=jnp.uint32)
    F.grid_step(t, _H, 0, 0, (0, s))
    F.grid_step(t, _H, 0, 0, phase="end")
    F.wrap_target(s, 0, num_devices=2, num_cores=1)
    F.iota_ids(s, (2, 2))
    F.scalar_program(np.zeros(4, np.int64), [s], [jnp.int32])
    F.vector_program(np.zeros(4, np.int64), [jnp.zeros(4)], [jnp.float32], [(4,)])
    F.threefry2x32(*(jnp.zeros(4, jnp.uint32),) * 4, (4,))
    with F.batched_runs():  # a `batch` of two signals, ended by a read
        t = F.semaphore_signal(t, _H, 0, 0, 1, 1)
        t = F.semaphore_signal(t, _H, 0, 0, 1, 1)
        t, _ = F.semaphore_read(t, _H, 0, 0, 1)
    return t


def _fits(target, n_operands, attrs):
    """Why a call breaks its op's layout, or None."""
    o, oo, rest, required, optional = _native.OP_LAYOUTS[target]
    if target == "mosaic_rt_batch":  # its members' attributes, prefixed `m<k>_`
        attrs = {a for a in attrs if not re.match(r"m\d+_", a)}
    if n_operands < len(o) or (not rest and n_operands > len(o) + len(oo)):
        return f"{n_operands} operands for layout {o} + optional {oo} (rest {rest!r})"
    if not set(required) <= attrs:
        return f"attributes {sorted(set(required) - attrs)} missing"
    if not attrs <= set(required) | set(optional):
        return f"attributes {sorted(attrs - set(required) - set(optional))} not in the layout"
    return None


def test_every_target_has_a_layout_and_a_wrapper():
    targets = set(_native.ffi_targets())
    assert targets == set(_native.OP_LAYOUTS)
    for target in targets:
        assert callable(getattr(F, target.removeprefix("mosaic_rt_"), None)), target


def test_every_wrapper_emits_its_layout():
    calls = _calls(_uses, jnp.int32(1))
    bad = [f"{t}: {why}" for t, n, a in calls if (why := _fits(t, n, a))]
    assert not bad, "\n".join(bad)
    assert {t for t, _, _ in calls} == set(_native.OP_LAYOUTS), "a target not exercised"


# Optional attributes the layout allows and no wrapper emits:
# check_revisit's merged starts are always one vector (no static `fixed`).
_NEVER_EMITTED = {("mosaic_rt_check_revisit", "fixed")}


def test_every_optional_name_is_exercised():
    # The optional forms above reach each optional attribute (so a name
    # dropped or renamed on one side shows up as unused here).
    calls = _calls(_uses, jnp.int32(1))
    seen = {}
    for t, _, a in calls:
        seen.setdefault(t, set()).update(a)
    unused = {
        t: sorted(u)
        for t, (_, _, _, _, opt) in _native.OP_LAYOUTS.items()
        if (u := {a for a in opt if a not in seen[t] and (t, a) not in _NEVER_EMITTED})
    }
    assert not unused, unused


def test_the_layout_helpers_name_the_op():
    with pytest.raises(emit.WireLayoutError, match="mosaic_rt_free_buffer: operand 'buffer_id'"):
        emit._args("free_buffer", token=0, handle=0, device=0, core=0)
    with pytest.raises(emit.WireLayoutError, match=r"mosaic_rt_core_end: no operand.*'sem'"):
        emit._args("core_end", token=0, handle=0, device=0, core=0, sem=1)
    with pytest.raises(emit.WireLayoutError, match="mosaic_rt_core_end: takes no operands after"):
        emit._args("core_end", (1,), token=0, handle=0, device=0, core=0)
    with pytest.raises(emit.WireLayoutError, match=r"mosaic_rt_dma_wait: attributes missing \['bytes'\]"):
        emit._checked("dma_wait", {})
    with pytest.raises(emit.WireLayoutError, match=r"not in its layout \['nbytes'\]"):
        emit._checked("dma_wait", {"bytes": 1, "nbytes": 1})


def test_layout_orders_named_operands():
    assert emit._args("load", token="t", handle="h", device="d", core="c", buffer_id="b", starts="s") == [
        "t",
        "h",
        "d",
        "c",
        "b",
        "s",
    ]
    assert emit._args(
        "load", ("x",), starts="s", buffer_id="b", core="c", device="d", handle="h", token="t", mask="m"
    ) == ["t", "h", "d", "c", "b", "s", "m", "x"]


def test_region_keys_and_sentinel_come_from_the_native_side():
    assert emit._DYNAMIC_START == _native.DYNAMIC_START == -(2**63)
    _, attrs = emit._region_parts(F.TracedRegion.slices((1, 2)), "src_")
    assert set(attrs) == set(_native.REGION_KEYS["src_"])
