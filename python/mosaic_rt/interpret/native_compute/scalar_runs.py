"""The rank-0 integer/bool work of a kernel jaxpr, gathered into as few
native scalar programs (`scalar_program`) as the block's data flow allows:
each program is one native call (cheap at run time, nothing to compile),
where XLA would compile a fusion per stretch (benches/PERFORMANCE.md,
"Native compute instead of XLA fusions").

`plan(jaxpr)` lists the block's *items*, pure scalar computations:

* an eligible equation (an eligible primitive, or a `jit` whose whole body
  is eligible, as jnp's `remainder` / `where`; every operand and result a
  rank-0 int or bool);
* the semaphore-array lookup `sems.at[i]` of a DMA / semaphore equation
  (`scalar_items.lookups`);
* the branch index of a `cond`, clamped to its branches;
* a `cond` branch's own items that read only the branch's operands,
  hoisted out of the branch (computed whether or not it runs: pure, and
  cheaper than a call of their own inside it) and passed in as operands;
* a counted loop's counter step (`COUNTER`).

Items are pure, so an item may run anywhere between the equation that
defines its last operand and its first reader: the plan groups them with
the fewest groups (interval stabbing: sorted by latest point, each group at
the latest point of its first item), and `emit_group` emits one program per
group. Items whose operands are all trace-time constants stay constants.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from mosaic_rt import jax_internals as jx
from mosaic_rt.interpret.native_compute import scalar_items
from mosaic_rt.interpret.native_compute.scalar_items import Item
from mosaic_rt.interpret.native_compute.scalar_program import MAX_VALUES, ProgramBuilder, is_scalar_type

_NEVER = math.inf
_I32 = np.dtype(np.int32)


@dataclasses.dataclass(frozen=True)
class Plan:
    groups: dict  # equation index -> items emitted before it (n: at the end)
    exports: dict  # equation index -> keys of its group read outside it
    absorbed: frozenset  # indices of the equations that are items
    # Items a parent may hoist (they read only the jaxpr's invars and
    # literals) and the keys of theirs that the rest of the jaxpr reads.
    entry: tuple
    entry_needed: frozenset


_PLANS: dict = {}


def plan(jaxpr, count: int | None = None) -> Plan:
    """The plan of `jaxpr` (cached per jaxpr object); with `count`, also
    the counter step of a loop of `count` steps (`COUNTER`)."""
    key = (id(jaxpr), count)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is jaxpr:
        return hit[1]
    if len(_PLANS) > 512:  # plans of jaxprs traced long ago (they hold the jaxprs)
        _PLANS.clear()
    result = _plan(jaxpr, count)
    _PLANS[key] = (jaxpr, result)
    return result


def _plan(jaxpr, count) -> Plan:
    eqns = jaxpr.eqns
    n = len(eqns)
    items: list[Item] = []
    absorbed = set()
    for j, e in enumerate(eqns):
        item = scalar_items.of_eqn(e, j)
        if item is not None:
            items.append(item)
            absorbed.add(j)
        else:
            items.extend(scalar_items.around(e, j, plan))
    if count is not None:
        items.append(scalar_items.counter(count, n))
    if not items:
        return Plan({}, {}, frozenset(), (), frozenset())

    # Where each value becomes available, and where it is first needed.
    defined_at = {v: j + 1 for j, e in enumerate(eqns) if j not in absorbed for v in e.outvars}
    by_key = {k: m for m, it in enumerate(items) for k in it.keys}
    readers: dict = {}  # key -> indices of the items reading it
    for m, it in enumerate(items):
        for d in it.deps:
            if not isinstance(d, jx.Literal) and d in by_key:
                readers.setdefault(d, []).append(m)
    outside: dict = {}  # var -> first non-item equation (n: the result) reading it
    for j, e in enumerate(eqns):
        if j not in absorbed:
            # A cond whose index is clamped by an item reads the clamped
            # index (or, when that is a constant, the index's constant value).
            skip = e.invars[0] if scalar_items.clamps(e) else None
            for v in e.invars:
                if not isinstance(v, jx.Literal) and v is not skip:
                    outside.setdefault(v, j)
    for v in jaxpr.outvars:
        if not isinstance(v, jx.Literal):
            outside.setdefault(v, n)

    earliest = []
    for it in items:
        at = 0
        for d in it.deps:
            if not isinstance(d, jx.Literal):
                m = by_key.get(d)
                at = max(at, earliest[m] if m is not None else defined_at.get(d, 0))
        earliest.append(at)
    latest = [-1] * len(items)  # -1: dead, nothing reads it
    used_outside = [it.exported or any(k in outside for k in it.keys) for it in items]
    for m in range(len(items) - 1, -1, -1):
        it = items[m]
        at = min((outside[k] for k in it.keys if k in outside), default=it.origin if it.exported else _NEVER)
        for k in it.keys:
            for r in readers.get(k, ()):
                if latest[r] >= 0:
                    at = min(at, latest[r])
        if at != _NEVER:
            latest[m] = at

    # Interval stabbing: the fewest points covering every item's interval.
    point_of = [-1] * len(items)
    point = -1
    for m in sorted((m for m in range(len(items)) if latest[m] >= 0), key=lambda m: latest[m]):
        if point < 0 or point < earliest[m]:
            point = latest[m]
        point_of[m] = point
    groups: dict[int, list] = {}
    exports: dict[int, set] = {}
    for m, p in enumerate(point_of):
        if p < 0:
            continue
        groups.setdefault(p, []).append(items[m])
        keys = items[m].keys
        if used_outside[m] or any(point_of[r] != p for k in keys for r in readers.get(k, ())):
            exports.setdefault(p, set()).update(keys)
    # Dead equation items are absorbed too (never evaluated: nothing reads them).
    entry, entry_needed = _entry(jaxpr, items, latest, used_outside, by_key, readers)
    return Plan(
        {p: tuple(g) for p, g in groups.items()},
        {p: frozenset(exports.get(p, ())) for p in groups},
        frozenset(absorbed),
        entry,
        entry_needed,
    )


def _entry(jaxpr, items, latest, used_outside, by_key, readers):
    """The items that read only `jaxpr.invars`, literals and each other,
    and which of their keys the rest of the jaxpr reads."""
    invars = set(jaxpr.invars)
    entry_ids = set()
    entry = []
    for m, it in enumerate(items):
        if latest[m] < 0:
            continue
        if all(isinstance(d, jx.Literal) or d in invars or by_key.get(d) in entry_ids for d in it.deps):
            entry_ids.add(m)
            entry.append(it)
    needed = set()
    for m in entry_ids:
        keys = items[m].keys
        if used_outside[m] or any(r not in entry_ids and latest[r] >= 0 for k in keys for r in readers.get(k, ())):
            needed.update(keys)
    return tuple(entry), frozenset(needed)


def emit_group(items, exports, *, read, computed, write, eval_concrete):
    """Emits one group: items whose operands are all trace-time constants
    are evaluated as constants (`eval_concrete`; others than equations of
    this jaxpr are skipped: their reader computes them), the others by one
    native program (more when it would exceed `MAX_VALUES`). Results of
    equations go to `write`, the other keys into `computed`; items whose
    results are in `computed` already (hoisted by the parent) are skipped."""
    b = ProgramBuilder()
    refs: dict = {}  # key of an item computed by `b` -> its ref

    def flush(rest):
        nonlocal b
        wanted = set(exports)
        for it in rest:
            wanted.update(d for d in it.deps if not isinstance(d, jx.Literal))
        keys = [k for k in refs if k in wanted]
        if keys:
            _store(keys, b.emit([refs[k] for k in keys]), computed, write)
        b = ProgramBuilder()
        refs.clear()

    for pos, it in enumerate(items):
        if any(k in computed for k in it.keys):
            continue
        if b.num_values + it.weight > MAX_VALUES:
            flush(items[pos:])
        values = []
        native = False
        for d in it.deps:
            if isinstance(d, jx.Literal):
                values.append(None)
                continue
            if d in refs:
                values.append(None)
                native = True
                continue
            if isinstance(d, tuple):
                value = computed.get(d)
                if value is None:  # skipped (constant operands): its reader computes it
                    break
            else:
                value = read(d)
            native |= isinstance(value, jx.Tracer)
            values.append(value)
        else:
            if native and it.native_ok(values):
                out = it.build(b, [_ref(b, refs, d, v) for d, v in zip(it.deps, values)], values)
                refs.update(zip(it.keys, out))
                continue
            if it.eqn is not None and it.local:
                eval_concrete(it.eqn)
    flush(())


def _ref(b: ProgramBuilder, refs, dep, value):
    if isinstance(dep, jx.Literal):
        return b.const(dep.val, dep.aval.dtype)
    r = refs.get(dep)
    if r is not None:
        return r
    if isinstance(value, jx.Tracer):  # (a semaphore ref's aval is not its ids' type)
        return b.input(value, value.dtype)
    return b.const(value, dep.aval.dtype)


def _store(keys, values, computed, write):
    for k, v in zip(keys, values):
        computed[k] = v
        if not isinstance(k, tuple):
            write(k, v)


# ------------------------------------------- single calls (no plan item)


def clamp_index(index, branches: int):
    """A traced int32 branch index clamped to ``0..branches`` natively."""
    b = ProgramBuilder()
    return b.emit([b.clamp_i32(b.input(index, _I32), 0, branches - 1)])[0]


def index_vector(vec, indices):
    """``vec[indices]`` (one int index per dimension) by one native call,
    as `scalar_items.add_index` computes it. None when not applicable (so
    the caller uses XLA)."""
    shape = tuple(np.shape(vec))
    if (
        not shape
        or len(indices) != len(shape)
        or not isinstance(vec, jx.Tracer)
        or not is_scalar_type(vec.dtype)
        or not all(np.shape(i) == () and is_scalar_type(_dtype_of(i)) for i in indices)
    ):
        return None
    b = ProgramBuilder()
    refs = []
    for i in indices:
        dtype = _dtype_of(i)
        refs.append((b.input(i, dtype) if isinstance(i, jx.Tracer) else b.const(i, dtype), dtype))
    return b.emit([scalar_items.add_index(b, b.input(vec, vec.dtype), shape, vec.dtype, refs)])[0]


def _dtype_of(x) -> np.dtype:
    dtype = getattr(x, "dtype", None)
    if dtype is None:  # a Python int: jax's default int
        return np.dtype(np.int32) if isinstance(x, int) and not isinstance(x, bool) else np.dtype(object)
    return np.dtype(dtype)
