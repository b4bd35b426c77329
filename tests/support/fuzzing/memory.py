"""Category "memory": loads and stores through `pl.ds` slices with static and
traced starts (read from an SMEM operand), strides, static slices and
integer indices, read-modify-writes, masked stores, masked loads
(`pltpu.load(..., mask=)`), `ref.bitcast` / `ref.reshape` views, copies
Python-unrolled over 128-column chunks and `fori_loop`s over rows. No grid:
every operand is one VMEM block; outputs are filled first, then written
piecewise. Meaning: the kernel itself over numpy refs (`fakes`).

Stock rejects masked loads and ref views, so kernels use them only now and
then (each such kernel is judged by its meaning alone).
"""

from __future__ import annotations

import dataclasses

from fuzzing import array_ops
from fuzzing.straight_line import Program
from fuzzing.values import Aval, bits, dt, kind, literal, shape_text

_DTYPES = ("float32", "bfloat16", "int32", "uint32", "int16", "int8", "uint8")
_SHAPES = [(8, 128), (16, 128), (4, 8, 128), (2, 16, 256), (1, 128), (8, 256), (3, 8, 128), (32, 128), (24, 128)]


@dataclasses.dataclass(frozen=True)
class Op:
    lines: tuple
    keep: bool = False  # output fills: never shrunk away


@dataclasses.dataclass(frozen=True)
class MemoryKernel:
    inputs: tuple  # ((name, Aval), ...): VMEM operands
    outputs: tuple  # ((name, Aval), ...)
    starts: tuple  # the SMEM operand's int32 values (traced starts)
    ops: tuple
    seeds: tuple
    special: bool
    category: str = "memory"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise"}

    def render(self) -> str:
        args = "".join(
            f"\n    make_input({s}, {shape_text(a.shape)}, {a.dtype!r}, special={self.special}),"
            for s, (_, a) in zip(self.seeds, self.inputs)
        )
        refs = ["idx_ref"] + [f"{n}_ref" for n, _ in self.inputs] + [f"{n}_ref" for n, _ in self.outputs]
        body = "\n".join(f"    {line}" for op in self.ops for line in op.lines)
        outs = ", ".join(f"jax.ShapeDtypeStruct({shape_text(a.shape)}, {dt(a.dtype)})" for _, a in self.outputs)
        specs = ["pl.BlockSpec(memory_space=pltpu.SMEM)"] + ["pl.BlockSpec(memory_space=pltpu.VMEM)"] * len(self.inputs)
        return f"""
ARGS = (
    np.asarray({list(self.starts)}, np.int32),{args}
)
OUT_SHAPES = [{outs}]


def kernel({", ".join(refs)}):
{body}


def run(params):
    return pl.pallas_call(
        kernel,
        out_shape=OUT_SHAPES,
        in_specs=[{", ".join(specs)}],
        out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * {len(self.outputs)},
        interpret=params,
    )(*ARGS)


def meaning():
    return meaning_call(kernel, ARGS, OUT_SHAPES)
"""

    def uses_fakes(self) -> bool:
        return True

    def shrinks(self):
        for k in reversed(range(len(self.ops))):
            if not self.ops[k].keep:
                yield dataclasses.replace(self, ops=self.ops[:k] + self.ops[k + 1 :])
        if self.special:
            yield dataclasses.replace(self, special=False)


class _Gen:
    def __init__(self, rng, starts: list, views: bool):
        self.rng, self.starts, self.views = rng, starts, views
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def start(self, lo: int, hi: int, traced_ok: bool = True, traced: bool = False) -> str:
        """A start in [lo, hi]: a literal or (``traced``: always) read from
        the SMEM operand (the TPU takes dynamic starts on all but the lane
        dimension)."""
        value = self.rng.randint(lo, hi)
        if traced or traced_ok and self.rng.random() < 0.4:
            self.starts.append(value)
            return f"idx_ref[{len(self.starts) - 1}]"
        return str(value)

    def view(self, ref: str, a: Aval) -> tuple[str, Aval]:
        """``ref`` maybe through a bitcast or reshape view."""
        rng = self.rng
        if not self.views or rng.random() < 0.5 or len(a.shape) < 2 or a.dtype not in _DTYPES:
            return ref, a
        if rng.random() < 0.6:
            others = [d for d in _DTYPES if kind(d) in "iu" and d != a.dtype]
            to = rng.choice(others + ["float32"])
            b0, b1 = bits(a.dtype), bits(to)
            m = a.shape[-2]
            if b1 > b0 and m % (b1 // b0):
                return ref, a
            m2 = m * b0 // b1
            return f"{ref}.bitcast({dt(to)})", Aval((*a.shape[:-2], m2, a.shape[-1]), to)
        if len(a.shape) == 3:
            return f"{ref}.reshape({a.shape[0] * a.shape[1]}, {a.shape[2]})", Aval(
                (a.shape[0] * a.shape[1], a.shape[2]), a.dtype
            )
        m = a.shape[0]
        split = [d for d in (2, 4, 8) if m % d == 0 and m > d]
        if not split:
            return ref, a
        d = rng.choice(split)
        return f"{ref}.reshape({d}, {m // d}, {a.shape[1]})", Aval((d, m // d, a.shape[1]), a.dtype)

    def index(self, shape, want=None) -> tuple[str, tuple]:
        """An indexer of ``shape`` and the shape it selects; ``want``: that
        shape must be this one (None: any)."""
        rng = self.rng
        n = len(shape)
        if want is not None:
            if len(want) > n or any(w > s for w, s in zip(want, shape[n - len(want) :])):
                return None
            lead = n - len(want)
        else:
            lead = rng.choice([0, 0, 0, 1]) if n >= 2 else 0
        parts, out = [], []
        for d, size in enumerate(shape):
            if d < lead:  # an integer index (the dimension is dropped)
                parts.append(self.start(0, size - 1))
                continue
            w = want[d - lead] if want is not None else None
            last = d == n - 1
            if w is None:
                r = rng.random()
                if r < 0.35 or size == 1:
                    w = size
                elif r < 0.6 and not last:
                    w = 1
                else:
                    w = rng.randint(1, size)
            if w == size and rng.random() < 0.7:
                parts.append(":")
                out.append(size)
                continue
            stride = 1
            if not last and rng.random() < 0.25 and w > 1:
                stride = rng.choice([2, 3])
                if (w - 1) * stride >= size:
                    stride = 1
            hi = size - 1 - (w - 1) * stride
            s = self.start(0, hi, traced_ok=not last)
            if stride > 1:
                parts.append(f"pl.ds({s}, {w}, stride={stride})")
            elif s.isdigit() and rng.random() < 0.5:
                parts.append(f"{s}:{int(s) + w}")
            else:
                parts.append(f"pl.ds({s}, {w})")
            out.append(w)
        return ", ".join(parts), tuple(out)


def _compute(rng, name: str, v: str, a: Aval, to: str) -> str:
    """``v`` (of type ``a``) maybe changed a little, as type ``to``."""
    r = rng.random()
    if r < 0.3 and kind(a.dtype) in "fiu":
        return f"({v} + {literal(rng, a.dtype, nonzero=True)}).astype({dt(to)})"
    if r < 0.45 and kind(a.dtype) in "fiu":
        return f"({v} * {v}).astype({dt(to)})"
    return f"{v}.astype({dt(to)})"


def _loop_op(rng, g: _Gen, inputs, outputs) -> Op | None:
    """A loop of copies: Python-unrolled over 128-column chunks (the same
    equations over ``c * 128`` slices), or a `lax.fori_loop` over rows with
    dynamic row slices and a carried row sum."""
    src_name, src = rng.choice(inputs + outputs)
    dst_name, dst = rng.choice(outputs)
    (rs, cs), (rd, cd) = src.shape[-2:], dst.shape[-2:]
    lead_s = "".join(f"{rng.randrange(n)}, " for n in src.shape[:-2])
    lead_d = "".join(f"{rng.randrange(n)}, " for n in dst.shape[:-2])
    w = min(cs, cd)
    n = rng.randint(1, min(rs, rd))
    v = g.name()
    s_ref, d_ref = f"{src_name}_ref", f"{dst_name}_ref"
    if w % 128 == 0 and w >= 256 and rng.random() < 0.3:
        return _unrolled_from_traced_base(rng, g, v, src, dst, s_ref, d_ref, lead_s, lead_d, n)
    if w % 128 == 0 and w >= 256 and rng.random() < 0.5:
        chunks = w // 128
        s0, d0 = rng.randint(0, rs - n), rng.randint(0, rd - n)
        value = _compute(rng, v, v, Aval((n, 128), src.dtype), dst.dtype)
        return Op(
            (
                f"for c in range({chunks}):",
                f"    {v} = {s_ref}[{lead_s}pl.ds({s0}, {n}), pl.ds(c * 128, 128)]",
                f"    {d_ref}[{lead_d}pl.ds({d0}, {n}), pl.ds(c * 128, 128)] = {value}",
            )
        )
    s0, d0, d1 = rng.randint(0, rs - n), rng.randint(0, rd - n), rng.randrange(rd)
    if rng.random() < 0.4:
        return _pl_loop_with_invariants(rng, g, v, src, dst, s_ref, d_ref, lead_s, lead_d, n, w, s0, d0)
    acc = "jnp.float32" if kind(src.dtype) == "f" else "jnp.int32"
    value = _compute(rng, v, v, Aval((1, w), src.dtype), dst.dtype)
    trips = g.start(n, n)
    return Op(
        (
            f"def rows_{v}(i, acc):",
            f"    {v} = {s_ref}[{lead_s}pl.ds(i + {s0}, 1), 0:{w}]",
            f"    {d_ref}[{lead_d}pl.ds(i + {d0}, 1), 0:{w}] = {value}",
            f"    return acc + {v}.astype({acc})",
            f"acc_{v} = lax.fori_loop(0, {trips}, rows_{v}, jnp.zeros((1, {w}), {acc}))",
            f"{d_ref}[{lead_d}pl.ds({d1}, 1), 0:{w}] = acc_{v}.astype({dt(dst.dtype)})",
        )
    )


def _unrolled_from_traced_base(rng, g: _Gen, v, src, dst, s_ref, d_ref, lead_s, lead_d, n) -> Op:
    """Copies of the same column work that Python unrolled over ``cb + off``
    slices, ``cb`` traced (what `rewrites.unrolled` widens into one)."""
    cs, cd = src.shape[-1], dst.shape[-1]
    width = 128
    chunks = rng.randint(2, min(cs, cd) // width)
    blocks = min(cs, cd) // width - chunks + 1  # where the run of chunks may start
    base = g.start(0, blocks - 1, traced=True)
    s0 = g.start(0, src.shape[-2] - n)
    d0 = g.start(0, dst.shape[-2] - n)
    # Each copy's work: a random elementwise program over the chunk (its
    # iotas count within a chunk: one wide copy must not count across them).
    chunk = Aval((n, width), src.dtype)
    avals, stmts, varying = {"x": chunk}, [], {"x"}
    target = rng.randint(1, 4)
    for _ in range(40):
        if len(stmts) >= target:
            break
        st = array_ops.random_stmt(rng, avals, f"t{len(stmts)}", chunk.shape, (src.dtype, dst.dtype), varying)
        if st is not None and st.aval.shape == chunk.shape:
            stmts.append(st)
            avals[st.name] = st.aval
    last = stmts[-1] if stmts else None
    lane = f"lax.broadcasted_iota(jnp.int32, {shape_text(chunk.shape)}, 1)"
    if rng.random() < 0.6:  # a lane position inside the chunk, always
        prev = last.name if last else "x"
        aval = last.aval if last else chunk
        if rng.random() < 0.5 or aval.dtype == "bool":
            expr = f"jnp.where({lane} < {rng.randrange(1, width)}, {{0}}, jnp.zeros_like({{0}}))"
        else:
            expr = f"{{0}} + {lane}.astype({{0}}.dtype)"
        last = array_ops.Stmt(f"t{len(stmts)}", expr, (prev,), aval)
        stmts.append(last)
    prog = Program((("x", chunk),), tuple(stmts), (last.name if last else "x",)).pruned()
    lines = [f"    {line}" for line in prog.body(f"work_{v}").splitlines()]
    return Op(
        (
            *(line[4:] for line in lines),
            # (scalars read before the copies: each copy is then loads,
            # elementwise work and stores only)
            f"cb_{v}, rs_{v}, rd_{v} = pl.multiple_of({base} * {width}, {width}), {s0}, {d0}",
            f"for off in range(0, {chunks * width}, {width}):",
            f"    cols = pl.ds(cb_{v} + off, {width})",
            f"    {v} = {s_ref}[{lead_s}pl.ds(rs_{v}, {n}), cols]",
            f"    {d_ref}[{lead_d}pl.ds(rd_{v}, {n}), cols] = work_{v}({v})[0].astype({dt(dst.dtype)})",
        )
    )


def _pl_loop_with_invariants(rng, g: _Gen, v, src, dst, s_ref, d_ref, lead_s, lead_d, n, w, s0, d0) -> Op:
    """A `pl.loop` over rows whose body computes loop-invariant integer work
    (a shift and a lane mask from SMEM values: what `rewrites.hoisting`
    moves before the loop) and uses it on each row."""
    j1 = len(g.starts)
    g.starts.append(rng.randint(-3, 40))
    j2 = len(g.starts)
    g.starts.append(rng.randint(0, w // 8))
    m = f"lax.broadcasted_iota(jnp.int32, (1, {w}), 1) < k2_{v} * 8"
    if kind(src.dtype) in "iu":
        sh = f"(k1_{v} % 4 * 2).astype({v}.dtype)"
        use = f"jnp.where(m_{v}, {v}, lax.shift_right_logical({v}, jnp.broadcast_to({sh}, {v}.shape)))"
    else:
        use = f"jnp.where(m_{v}, {v}, {v} * 2)"
    value = _compute(rng, f"u_{v}", f"u_{v}", Aval((1, w), src.dtype), dst.dtype)
    trips = g.start(n, n) if rng.random() < 0.5 else str(n)
    return Op(
        (
            f"k1_{v}, k2_{v} = idx_ref[{j1}], idx_ref[{j2}]  # read before the loop, used inside",
            f"@pl.loop(0, {trips})",
            f"def rows_{v}(i):",
            f"    m_{v} = {m}",
            f"    {v} = {s_ref}[{lead_s}pl.ds(i + {s0}, 1), 0:{w}]",
            f"    u_{v} = {use}",
            f"    {d_ref}[{lead_d}pl.ds(i + {d0}, 1), 0:{w}] = {value}",
        )
    )


def generate(rng) -> MemoryKernel:
    views = rng.random() < 0.15
    masked_loads = rng.random() < 0.1
    shape = rng.choice(_SHAPES)
    inputs = []
    for i in range(rng.randint(1, 3)):
        s = shape if i == 0 or rng.random() < 0.6 else rng.choice(_SHAPES)
        inputs.append((f"x{i}", Aval(s, rng.choice(_DTYPES))))
    outputs = []
    for i in range(rng.randint(1, 2)):
        s = shape if i == 0 or rng.random() < 0.6 else rng.choice(_SHAPES)
        outputs.append((f"o{i}", Aval(s, rng.choice(_DTYPES))))
    starts: list = []
    g = _Gen(rng, starts, views)
    ops = [
        Op((f"{n}_ref[...] = jnp.full({shape_text(a.shape)}, {literal(rng, a.dtype)}, {dt(a.dtype)})",), keep=True)
        for n, a in outputs
    ]
    tries = 0
    while len(ops) < len(outputs) + rng.randint(1, 8) and tries < 60:
        tries += 1
        if rng.random() < 0.2:
            op = _loop_op(rng, g, inputs, outputs)
            if op is not None:
                ops.append(op)
            continue
        src_name, src = rng.choice(inputs + outputs)
        ref, sa = g.view(f"{src_name}_ref", src)
        got = g.index(sa.shape)
        if got is None:
            continue
        sidx, vshape = got
        if not vshape:
            continue
        dst_name, dst = rng.choice(outputs)
        dref, da = g.view(f"{dst_name}_ref", dst)
        got = g.index(da.shape, vshape)
        if got is None:
            continue
        didx, _ = got
        v = g.name()
        lines = []
        r = rng.random()
        axis, bound = rng.randrange(len(vshape)), rng.randint(0, max(vshape))
        mask = f"lax.broadcasted_iota(jnp.int32, {shape_text(vshape)}, {axis}) < {bound}"
        if masked_loads and r < 0.3:
            lines.append(f"m{v} = {mask}")
            lines.append(f"{v} = pltpu.load({ref}.at[{sidx}], mask=m{v})")
            lines.append(f"{v} = jnp.where(m{v}, {v}, jnp.zeros_like({v}))")
        else:
            lines.append(f"{v} = {ref}[{sidx}]")
        value = _compute(rng, v, v, sa, da.dtype)
        r = rng.random()
        if r < 0.15:
            lines.append(f"m{v}s = {mask}")
            lines.append(f"pltpu.store({dref}.at[{didx}], {value}, mask=m{v}s)")
        elif r < 0.3 and kind(da.dtype) in "fiu":
            lines.append(f"{dref}[{didx}] += {value}")
        else:
            lines.append(f"{dref}[{didx}] = {value}")
        ops.append(Op(tuple(lines)))
    seeds = tuple(rng.randrange(1 << 30) for _ in inputs)
    return MemoryKernel(tuple(inputs), tuple(outputs), tuple(starts) or (0,), tuple(ops), seeds, rng.random() < 0.3)
