"""Random array statements over typed values: arithmetic, bit ops and
shifts, integer division and remainder (by zero and negatives included),
compares and selects, casts and bitcasts, iotas, broadcasts, size-1 and
static slices, reductions with and without keepdims, rolls, transposes.

`random_stmt` proposes one; its type comes from tracing it, so a proposal
jax rejects is dropped and another drawn.
"""

from __future__ import annotations

import math

from fuzzing.straight_line import Stmt
from fuzzing.values import FLOATS, INTS, Aval, bits, broadcastable, dt, kind, literal, shape_text, trace_aval

_ARITH = ["{0} + {1}", "{0} - {1}", "{0} * {1}", "jnp.maximum({0}, {1})", "jnp.minimum({0}, {1})"]
_ARITH += ["lax.max({0}, {1})", "lax.min({0}, {1})"]
_FLOAT_ONLY = ["{0} / {1}"]
_INT_ONLY = ["lax.div({0}, {1})", "lax.rem({0}, {1})", "{0} // {1}", "{0} % {1}"]
_BITS = ["{0} & {1}", "{0} | {1}", "{0} ^ {1}"]
_SHIFTS = ["lax.shift_left({0}, {1})", "lax.shift_right_logical({0}, {1})", "lax.shift_right_arithmetic({0}, {1})"]
_COMPARE = ["{0} == {1}", "{0} != {1}", "{0} < {1}", "{0} <= {1}", "{0} > {1}", "{0} >= {1}"]
_UNARY_ANY = ["-{0}", "jnp.abs({0})"]
_UNARY_FLOAT = ["jnp.exp({0})", "jnp.log({0})", "jnp.sqrt({0})", "jnp.tanh({0})", "jnp.floor({0})"]
_UNARY_FLOAT += ["jnp.ceil({0})", "jnp.sign({0})", "lax.rsqrt({0})", "jnp.round({0})", "lax.logistic({0})"]
_UNARY_INT = ["~{0}", "jnp.sign({0})"]


def _pick(rng, avals: dict, pred):
    names = [n for n, a in avals.items() if pred(a)]
    return rng.choice(names) if names else None


def _partner(rng, avals, a: Aval, literal_p=0.3):
    """A second operand for ``a``: a value of its dtype whose shape
    broadcasts with it, else a literal; as (text, args)."""
    if rng.random() >= literal_p:
        b = _pick(rng, avals, lambda v: v.dtype == a.dtype and broadcastable(v.shape, a.shape))
        if b is not None:
            return "{1}", (b,)
    return literal(rng, a.dtype), ()


def _binary(rng, avals, templates, pred):
    a = _pick(rng, avals, pred)
    if a is None:
        return None
    other, extra = _partner(rng, avals, avals[a])
    t = rng.choice(templates)
    if rng.random() < 0.5 and extra == ():  # a literal on the left too
        t = t.replace("{0}", "{X}").replace("{1}", "{0}").replace("{X}", other)
        return t, (a,)
    return t.replace("{1}", other), (a, *extra)


def _shift(rng, avals):
    a = _pick(rng, avals, lambda v: kind(v.dtype) in "iu")
    if a is None:
        return None
    av = avals[a]
    t = rng.choice(_SHIFTS + ["{0} << {1}", "{0} >> {1}"])
    if rng.random() < 0.5:
        b = _pick(rng, avals, lambda v: v.dtype == av.dtype and broadcastable(v.shape, av.shape))
        if b is not None:
            return t, (a, b)
    amount = rng.choice([0, 1, 3, bits(av.dtype) - 1, bits(av.dtype), bits(av.dtype) + 1])
    return t.replace("{1}", str(amount)), (a,)


def _select(rng, avals):
    c = _pick(rng, avals, lambda v: v.dtype == "bool")
    if c is None:
        return None
    cs = avals[c].shape
    a = _pick(rng, avals, lambda v: broadcastable(v.shape, cs))
    if a is None:
        return None
    other, extra = _partner(rng, avals, avals[a])
    if rng.random() < 0.5:
        return f"jnp.where({{0}}, {{1}}, {other.replace('{1}', '{2}')})", (c, a, *extra)
    return f"jnp.where({{0}}, {other.replace('{1}', '{2}')}, {{1}})", (c, a, *extra)


def _cast(rng, avals, dtypes):
    a = _pick(rng, avals, lambda v: True)
    target = rng.choice([d for d in dtypes if d != "int4"])
    if rng.random() < 0.15:  # a bitcast between types of one width
        av = avals[a]
        same = [d for d in dtypes if d not in ("bool", "int4", av.dtype) and bits(d) == bits(av.dtype)]
        if same and av.dtype not in ("bool", "int4"):
            return f"lax.bitcast_convert_type({{0}}, {dt(rng.choice(same))})", (a,)
    return f"{{0}}.astype({dt(target)})", (a,)


def _variant(rng, shape):
    """``shape`` with some dimensions made 1."""
    return tuple(1 if rng.random() < 0.35 else d for d in shape)


def _iota(rng, shape):
    s = _variant(rng, shape) if rng.random() < 0.5 else shape
    d = rng.randrange(len(s))
    t = rng.choice(["int32"] * 4 + ["uint32", "float32"])
    return f"lax.broadcasted_iota({dt(t)}, {shape_text(s)}, {d})", ()


def _broadcast(rng, avals, shape):
    a = _pick(rng, avals, lambda v: v.shape != shape and broadcastable(v.shape, shape))
    if a is None:
        return None
    target = tuple(max(x, y) for x, y in zip((1,) * (len(shape) - len(avals[a].shape)) + avals[a].shape, shape))
    if len(avals[a].shape) > len(shape):
        return None
    return f"jnp.broadcast_to({{0}}, {shape_text(target)})", (a,)


def _slice(rng, avals):
    a = _pick(rng, avals, lambda v: len(v.shape) >= 1 and v.size > 1)
    if a is None:
        return None
    shape = avals[a].shape
    axis = rng.randrange(len(shape))
    n = shape[axis]
    if rng.random() < 0.6:  # a size-1 slice (to broadcast back)
        lo = rng.randrange(n)
        hi = lo + 1
    else:
        lo = rng.randrange(n)
        hi = rng.randrange(lo + 1, n + 1)
    index = ", ".join([":"] * axis + [f"{lo}:{hi}"])
    return f"{{0}}[{index}]", (a,)


def _reduce(rng, avals):
    a = _pick(rng, avals, lambda v: len(v.shape) >= 1 and kind(v.dtype) in "fiub")
    if a is None:
        return None
    av = avals[a]
    axis = rng.randrange(len(av.shape))
    if rng.random() < 0.2 and len(av.shape) >= 2:
        axis = tuple(sorted(rng.sample(range(len(av.shape)), 2)))
    keep = rng.random() < 0.6
    if av.dtype == "bool":
        f = rng.choice(["jnp.any", "jnp.all"])
    else:
        f = rng.choice(
            ["jnp.sum", "jnp.max", "jnp.min", "jnp.max", "jnp.min"] + (["jnp.prod"] if kind(av.dtype) != "f" else [])
        )
    return f"{f}({{0}}, axis={axis}, keepdims={keep})", (a,)


def _roll(rng, avals):
    a = _pick(rng, avals, lambda v: len(v.shape) >= 2 and kind(v.dtype) in "fiu" and bits(v.dtype) == 32)
    if a is None:
        return None
    shape = avals[a].shape
    axis = rng.randrange(len(shape) - 2, len(shape))
    shift = rng.randrange(shape[axis])
    return f"pltpu.roll({{0}}, {shift}, {axis})", (a,), f"jnp.roll({{0}}, {shift}, {axis})"


def _transpose(rng, avals):
    a = _pick(rng, avals, lambda v: len(v.shape) == 2 and bits(v.dtype) == 32)
    return None if a is None else ("{0}.T", (a,))


def _rank(rng, avals):
    """A leading 1 added, or a leading 1 taken away."""
    a = _pick(rng, avals, lambda v: 1 <= len(v.shape) <= 3)
    if a is None:
        return None
    shape = avals[a].shape
    if shape[0] == 1 and len(shape) >= 2 and rng.random() < 0.6:
        return "{0}[0]", (a,)
    return "{0}[None]", (a,)


def _full(rng, shape, dtypes):
    t = rng.choice([d for d in dtypes if d != "int4"])
    s = _variant(rng, shape)
    return f"jnp.full({shape_text(s)}, {literal(rng, t)}, {dt(t)})", ()


def random_stmt(rng, avals: dict, name: str, shape: tuple, dtypes: tuple, varying: set | None = None) -> Stmt | None:
    """One statement reading ``avals`` (name -> Aval); ``shape``: the
    kernel's main shape (iotas, broadcasts and constants are of it or of
    it with some dimensions 1); ``dtypes``: the types in play.

    ``varying``: names of values loaded from memory, unchanged. An integer
    division or remainder reads one of them: jaxlib 0.10.2's XLA kills the
    process (SIGFPE) folding a division by a constant zero, in any jitted
    program, and its simplifier makes constants of more than literals
    (``where(p, 0, 0)``, ``x - x``), so only a value loaded from memory is
    sure not to be one."""
    stmt, divides = _random_stmt(rng, avals, name, shape, dtypes)
    if stmt is not None and divides and varying is not None and not any(a in varying for a in stmt.args):
        return None
    return stmt


def _random_stmt(rng, avals: dict, name: str, shape: tuple, dtypes: tuple) -> tuple:
    """(a statement or None, whether it divides integers)."""
    r = rng.random()
    meaning = None
    divides = False
    if r < 0.22:
        got = _binary(rng, avals, _ARITH, lambda v: kind(v.dtype) in "fiu")
    elif r < 0.27:
        got = _binary(rng, avals, _FLOAT_ONLY, lambda v: kind(v.dtype) == "f")
    elif r < 0.35:
        got = _binary(rng, avals, _INT_ONLY, lambda v: kind(v.dtype) in "iu")
        divides = True
    elif r < 0.42:
        got = _binary(rng, avals, _BITS, lambda v: kind(v.dtype) in "iub")
    elif r < 0.48:
        got = _shift(rng, avals)
    elif r < 0.55:
        got = _binary(rng, avals, _COMPARE, lambda v: kind(v.dtype) in "fiub")
    elif r < 0.61:
        got = _select(rng, avals)
    elif r < 0.66:
        a = _pick(rng, avals, lambda v: kind(v.dtype) in "fiu")
        if a is None:
            return None, divides
        pool = _UNARY_ANY + (_UNARY_FLOAT if kind(avals[a].dtype) == "f" else _UNARY_INT)
        got = rng.choice(pool), (a,)
    elif r < 0.72:
        got = _cast(rng, avals, dtypes)
    elif r < 0.76:
        got = _iota(rng, shape)
    elif r < 0.81:
        got = _broadcast(rng, avals, shape)
    elif r < 0.86:
        got = _slice(rng, avals)
    elif r < 0.92:
        got = _reduce(rng, avals)
    elif r < 0.94:
        got = _roll(rng, avals)
        if got is not None:
            got, meaning = got[:2], got[2]
    elif r < 0.95:
        got = _transpose(rng, avals)
    elif r < 0.97:
        got = _rank(rng, avals)
    else:
        got = _full(rng, shape, dtypes)
    if got is None:
        return None, divides
    expr, args = got
    aval = trace_aval(expr, [avals[a] for a in args])
    if aval is None or aval.size == 0 or aval.size > 1 << 16 or aval.dtype not in (*FLOATS, *INTS, "bool"):
        return None, divides
    if meaning is not None and trace_aval(meaning, [avals[a] for a in args]) != aval:
        return None, divides
    return Stmt(name, expr, tuple(args), aval, meaning), divides


def as_output(name: str, aval: Aval, new_name: str) -> Stmt | None:
    """A statement making ``name`` storable as a kernel output (rank >= 1;
    int4 is stored as int8), or None when it is already."""
    if len(aval.shape) == 0:
        return Stmt(new_name, "jnp.reshape({0}, (1, 1))", (name,), Aval((1, 1), aval.dtype))
    return None


def main_shapes():
    """Block shapes: tiles, size-1 and odd dims, ranks 1 to 3, and one
    beyond the native vector programs' size limit (16K elements)."""
    return [
        (8, 128),
        (8, 128),
        (1, 1),
        (1, 128),
        (8, 1),
        (4, 1, 128),
        (1, 1, 128),
        (1, 1, 1),
        (2, 8, 128),
        (3, 5),
        (7, 129),
        (16, 256),
        (128,),
        (5,),
        (1,),
        (2, 3, 4),
        (256, 128),
        (24, 128),
    ]


def count_elements(shape) -> int:
    return math.prod(shape)
