"""Category "transforms": the transformations users wrap kernels in, one or
two deep: `jax.vmap` (with and without `dimension_semantics`, nested),
`jax.jit` nesting, `lax.scan` / `lax.fori_loop` carrying the kernel's
output, `lax.cond` choosing the kernel or not, and `jax.custom_vjp`
(forward and backward kernels) under `jax.checkpoint` and `jax.grad`. The
kernel is a grid over row blocks running a random straight-line program
(`array_ops`) that maps a block to one of the same type. Meaning: the same
wrappers around the program in eager jax (`jax.disable_jit`).
"""

from __future__ import annotations

import dataclasses

from fuzzing import array_ops
from fuzzing.straight_line import Program
from fuzzing.values import Aval, dt, kind, shape_text

_WRAPPERS = ("vmap", "vmap", "jit", "scan", "fori", "cond", "grad")


@dataclasses.dataclass(frozen=True)
class TransformKernel:
    rows: int
    cols: int
    block_rows: int
    dtype: str
    program: Program  # x -> [y] of x's block type
    semantics: tuple | None
    wrappers: tuple  # outermost last; "grad" only alone (float32)
    batch: int
    coef: tuple  # grad: f(x) = a x^2 + b x
    seed: int
    category: str = "transforms"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise"}

    def render(self) -> str:
        r, c, bm = self.rows, self.cols, self.block_rows
        grid = r // bm
        sem = (
            ""
            if self.semantics is None
            else f", compiler_params=pltpu.CompilerParams(dimension_semantics={self.semantics!r})"
        )
        shape = (r, c)
        for w in self.wrappers:  # each wrapper's own leading dimension
            shape = {"vmap": (self.batch,), "scan": (3,)}.get(w, ()) + shape
        lines = []
        if "grad" in self.wrappers:
            a, b = self.coef
            return f"""
# Small integers as floats: every product and sum below is exact, so the
# gradient has one right answer whatever XLA fuses or contracts.
ARGS = (
    make_input({self.seed}, {shape_text((r, c))}, "int8", special=False).astype(np.float32),
    make_input({self.seed + 1}, {shape_text((r, c))}, "int8", special=False).astype(np.float32),
)


def fwd_kernel(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = {a} * x * x + {b} * x


def bwd_kernel(x_ref, g_ref, o_ref):
    o_ref[...] = g_ref[...] * (2 * {a} * x_ref[...] + {b})


def make(params):
    spec = pl.BlockSpec(({bm}, {c}), lambda i: (i, 0))
    out = jax.ShapeDtypeStruct(({r}, {c}), jnp.float32)

    def f_fwd_call(x):
        if params is None:
            return {a} * x * x + {b} * x
        return pl.pallas_call(
            fwd_kernel, out_shape=out, grid=({grid},), in_specs=[spec], out_specs=spec{sem}, interpret=params
        )(x)

    def f_bwd_call(x, g):
        if params is None:
            return g * (2 * {a} * x + {b})
        return pl.pallas_call(
            bwd_kernel, out_shape=out, grid=({grid},), in_specs=[spec, spec], out_specs=spec{sem}, interpret=params
        )(x, g)

    @jax.custom_vjp
    def f(x):
        return f_fwd_call(x)

    f.defvjp(lambda x: (f_fwd_call(x), x), lambda x, g: (f_bwd_call(x, g),))

    def loss(x, w):
        return jnp.sum(jax.checkpoint(f)(x) * w)

    return jax.jit(jax.grad(loss)) if params is not None else jax.grad(loss)


def run(params):
    return [make(params)(*ARGS)]


def meaning():
    with jax.disable_jit():
        return [np.asarray(make(None)(*ARGS))]


def compiled_meaning():
    return [np.asarray(jax.jit(make(None))(*ARGS))]
"""
        for w in self.wrappers:
            if w == "vmap":
                lines.append("f = jax.vmap(f)")
            elif w == "jit":
                lines.append("f = (lambda g: jax.jit(lambda x: g(jax.jit(g)(x))))(f)")
            elif w == "scan":
                lines.append(
                    "f = (lambda g: lambda xs: lax.scan(lambda carry, x: (g(carry + x), g(x)), xs[0], xs)[1])(f)"
                )
            elif w == "fori":
                lines.append("f = (lambda g: lambda x: lax.fori_loop(0, 2, lambda i, y: g(y), x))(f)")
            elif w == "cond":
                lines.append(
                    "f = (lambda g: lambda x: lax.cond(jnp.sum(x.astype(jnp.float32)) > 0, g, lambda y: y, x))(f)"
                )
        wraps = "\n".join(f"    {line}" for line in lines)
        return f"""
ARGS = (make_input({self.seed}, {shape_text(shape)}, {self.dtype!r}, special=False),)


{self.program.body("body")}


{self.program.body("body_outside", meaning=True)}


def kernel(x_ref, o_ref):
    o_ref[...] = body(x_ref[...])[0]


def make(params):
    if params is None:  # the program block by block (its iotas count within a block)

        def f(x):
            return jnp.concatenate([body_outside(x[i * {bm} : (i + 1) * {bm}])[0] for i in range({grid})])

    else:
        spec = pl.BlockSpec(({bm}, {c}), lambda i: (i, 0))
        f = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(({r}, {c}), {dt(self.dtype)}),
            grid=({grid},),
            in_specs=[spec],
            out_specs=spec{sem},
            interpret=params,
        )
{wraps}
    return f


def run(params):
    return [jax.jit(make(params))(*ARGS)]


def meaning():
    with jax.disable_jit():
        return [np.asarray(make(None)(*ARGS))]


def compiled_meaning():
    return [np.asarray(jax.jit(make(None))(*ARGS))]
"""

    def shrinks(self):
        for k in range(len(self.wrappers)):
            if len(self.wrappers) > 1:
                yield dataclasses.replace(self, wrappers=self.wrappers[:k] + self.wrappers[k + 1 :])
        if self.semantics is not None:
            yield dataclasses.replace(self, semantics=None)
        for p in self.program.shrinks(lambda a: False):
            if p.outputs and p.avals()[p.outputs[0]] == self.program.avals()[self.program.outputs[0]]:
                yield dataclasses.replace(self, program=p)


def generate(rng) -> TransformKernel:
    bm = rng.choice([8, 16])
    rows = bm * rng.choice([1, 2, 3])
    cols = rng.choice([128, 256])
    first = rng.choice(_WRAPPERS)
    if first == "grad":
        wrappers = ("grad",)
    else:
        wrappers = (first,)
        if rng.random() < 0.5:
            wrappers += (rng.choice([w for w in _WRAPPERS if w != "grad"]),)
    dtype = rng.choice(["float32", "int32", "float32", "uint32"])
    block = (bm, cols)
    x = Aval(block, dtype)
    avals = {"x": x}
    stmts = []
    varying = {"x"}
    for _ in range(rng.randint(1, 4)):
        st = array_ops.random_stmt(rng, avals, f"v{len(stmts)}", block, (dtype,), varying)
        if st is not None and st.aval.shape == block:
            stmts.append(st)
            avals[st.name] = st.aval
    last = stmts[-1].name if stmts else "x"
    if avals[last].dtype != dtype or kind(avals[last].dtype) == "b":
        st = array_ops.Stmt(f"v{len(stmts)}", f"{{0}}.astype({dt(dtype)})", (last,), x)
        stmts.append(st)
        last = st.name
    program = Program((("x", x),), tuple(stmts), (last,)).pruned()
    semantics = rng.choice([None, None, ("parallel",), ("arbitrary",)])
    # (no zero coefficient: XLA drops `+ 0.0`, which flips the sign of a
    # zero result: not a fidelity question, but not the op-by-op meaning)
    coef = (rng.choice([0.5, 1.0, -2.0, 3.0]), rng.choice([2.0, 1.0, -1.5]))
    return TransformKernel(
        rows, cols, bm, dtype, program, semantics, wrappers, rng.choice([2, 3]), coef, rng.randrange(1 << 30)
    )
