"""Category "scalar": SMEM programs. Scalars read from an SMEM operand at
static and computed indices, integer and float scalar arithmetic (division
and remainder by zero and by negatives, shifts by any amount, compares,
selects, casts), `lax.fori_loop` / `lax.while_loop` with carried values,
`lax.cond`, `pl.when`, stores to an SMEM output at computed indices and rows
of a VMEM output chosen by computed scalars. Meaning: the kernel itself
over numpy refs, op by op (`fakes`).

A program is a list of lines with indentation; the shrinker drops whole
statements (a loop or branch with its body); a candidate that no longer
traces is rejected by both interpreters, so it is not kept.
"""

from __future__ import annotations

import dataclasses

from fuzzing.values import literal

_TYPES = ("int32", "int32", "int32", "uint32", "float32", "bool")
_JNP = {"int32": "jnp.int32", "uint32": "jnp.uint32", "float32": "jnp.float32", "bool": "jnp.bool_"}


@dataclasses.dataclass(frozen=True)
class Stmt:
    lines: tuple  # source lines, indented relative to the statement
    keep: bool = False


@dataclasses.dataclass(frozen=True)
class ScalarKernel:
    n_in: int  # SMEM int32 operand length
    n_out: int  # SMEM int32 output length
    stmts: tuple
    seed: int
    category: str = "scalar"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise"}

    def uses_fakes(self) -> bool:
        return True

    def render(self) -> str:
        body = "\n".join(f"    {line}" for s in self.stmts for line in s.lines)
        return f"""
ARGS = (
    make_input({self.seed}, ({self.n_in},), "int32"),
    make_input({self.seed + 1}, ({self.n_in},), "float32", special=False),
)
OUT_SHAPES = [jax.ShapeDtypeStruct(({self.n_out},), jnp.int32), jax.ShapeDtypeStruct((8, 128), jnp.int32)]


def kernel(s_ref, f_ref, o_ref, ov_ref):
    for k in range({self.n_out}):
        o_ref[k] = jnp.int32(0)
    ov_ref[...] = jnp.zeros((8, 128), jnp.int32)
{body}


def run(params):
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(
        kernel,
        out_shape=OUT_SHAPES,
        in_specs=[smem, smem],
        out_specs=[smem, pl.BlockSpec(memory_space=pltpu.VMEM)],
        interpret=params,
    )(*ARGS)


def meaning():
    return meaning_call(kernel, ARGS, OUT_SHAPES)
"""

    def shrinks(self):
        for k in reversed(range(len(self.stmts))):
            if not self.stmts[k].keep:
                yield dataclasses.replace(self, stmts=self.stmts[:k] + self.stmts[k + 1 :])


class _Gen:
    def __init__(self, rng, n_in: int, n_out: int):
        self.rng, self.n_in, self.n_out = rng, n_in, n_out
        self.count = 0

    def fresh(self, prefix="a") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def pick(self, env: dict, dtype: str, cast_to: str | None = None) -> str:
        """A value of ``dtype``: a name of ``env`` or a literal. ``cast_to``:
        the value is cast to that type at once -- a float literal cast to an
        integer stays in its range, since jax folds a cast of a constant at
        trace time with numpy, where NaN, inf or an out-of-range float gives
        an undefined integer (INT_MIN on x86; XLA and a TPU saturate)."""
        names = [n for n, d in env.items() if d == dtype]
        if names and self.rng.random() < 0.8:
            return self.rng.choice(names)
        if dtype == "bool":
            return self.rng.choice(["jnp.bool_(True)", "jnp.bool_(False)"])
        if dtype == "float32" and cast_to in ("int32", "uint32"):
            return f"jnp.float32({self.rng.choice(['0.5', '2.0', '3.0', '7.75', '-0.0'])})"
        return f"{_JNP[dtype]}({literal(self.rng, dtype)})"

    def index(self, env: dict, n: int) -> str:
        """An in-bounds index into n elements: literal or computed."""
        if self.rng.random() < 0.4 or not any(d == "int32" for d in env.values()):
            return str(self.rng.randrange(n))
        e = self.pick(env, "int32")
        return f"({e} & 0x7FFFFFFF) % {n}"

    def expr(self, env: dict, dtype: str) -> str:
        """An expression of ``dtype`` over ``env``."""
        rng = self.rng
        r = rng.random()
        if dtype == "bool":
            t = rng.choice(["int32", "int32", "uint32", "float32"])
            a, b = self.pick(env, t), self.pick(env, t)
            if r < 0.15:
                return f"{self.pick(env, 'bool')} {rng.choice(['&', '|', '^'])} {self.pick(env, 'bool')}"
            return f"{a} {rng.choice(['==', '!=', '<', '<=', '>', '>='])} {b}"
        if r < 0.12:  # a read of the SMEM operand
            if dtype == "float32":
                return f"f_ref[{self.index(env, self.n_in)}]"
            read = f"s_ref[{self.index(env, self.n_in)}]"
            return read if dtype == "int32" else f"{read}.astype(jnp.uint32)"
        if r < 0.2:  # a cast
            src = rng.choice([t for t in ("int32", "uint32", "float32", "bool") if t != dtype])
            return f"{self.pick(env, src, cast_to=dtype)}.astype({_JNP[dtype]})"
        if r < 0.28:
            return f"jnp.where({self.pick(env, 'bool')}, {self.pick(env, dtype)}, {self.pick(env, dtype)})"
        a, b = self.pick(env, dtype), self.pick(env, dtype)
        ops = ["+", "-", "*", "jnp.maximum", "jnp.minimum"]
        if dtype == "float32":
            ops += ["/"]
        else:
            ops += ["lax.div", "lax.rem", "//", "%", "&", "|", "^", "lax.shift_left"]
            ops += ["lax.shift_right_arithmetic", "lax.shift_right_logical", "~", "-u", "jnp.abs"]
        op = rng.choice(ops)
        if op in ("lax.div", "lax.rem", "//", "%"):
            # The dividend read from memory right here: jaxlib 0.10.2's XLA
            # kills the process folding a division by a constant zero, and
            # its simplifier makes constants of more than literals.
            read = f"s_ref[{self.index(env, self.n_in)}]"
            a = read if dtype == "int32" else f"{read}.astype(jnp.uint32)"
        if op == "~":
            return f"~{a}"
        if op == "-u":
            return f"-{a}"
        if op == "jnp.abs":
            return f"jnp.abs({a})"
        if op[0].isalpha():
            return f"{op}({a}, {b})"
        return f"{a} {op} {b}"

    def block(self, env: dict, depth: int, n: int) -> list:
        """``n`` statements (each a list of lines) extending ``env``."""
        out = []
        for _ in range(n):
            got = self.stmt(env, depth)
            if got:
                out.append(got)
        return out

    def stmt(self, env: dict, depth: int) -> list:
        rng = self.rng
        r = rng.random()
        if r < 0.45 or depth >= 2:
            if r < 0.15:
                return self.store(env)
            dtype = rng.choice(_TYPES)
            name = self.fresh()
            text = self.expr(env, dtype)
            env[name] = dtype
            return [f"{name} = {text}"]
        if r < 0.62:
            return self.fori(env, depth)
        if r < 0.72:
            return self.while_(env, depth)
        if r < 0.85:
            return self.cond(env, depth)
        return self.when(env, depth)

    def store(self, env: dict) -> list:
        rng = self.rng
        v = self.pick(env, rng.choice(["int32", "int32", "uint32", "float32", "bool"]), cast_to="int32")
        if rng.random() < 0.6:
            return [f"o_ref[{self.index(env, self.n_out)}] = ({v}).astype(jnp.int32)"]
        row = self.index(env, 8)
        if rng.random() < 0.5:
            return [f"ov_ref[pl.ds({row}, 1), :] = jnp.full((1, 128), ({v}).astype(jnp.int32))"]
        col = self.index(env, 128)
        return [
            f"ov_ref[...] += jnp.where(lax.broadcasted_iota(jnp.int32, (8, 128), 1) == {col},"
            f" ({v}).astype(jnp.int32), 0)"
        ]

    def _carries(self, env: dict):
        names = [n for n, d in env.items() if d in ("int32", "uint32", "float32")]
        k = min(len(names), self.rng.randint(1, 3))
        return self.rng.sample(names, k) if k else []

    def _body(self, env: dict, depth: int, carries: list, extra: dict) -> tuple[list, list]:
        """Lines of a loop body over local copies of ``carries``; returns
        (lines, the names of the new carry values)."""
        inner = dict(env)
        inner.update(extra)
        local = [self.fresh("c") for _ in carries]
        for c, n in zip(carries, local):
            inner[n] = env[c]
        lines = [f"{', '.join(local)}{',' if len(local) == 1 else ''} = carry"] if local else []
        for s in self.block(inner, depth + 1, self.rng.randint(1, 4)):
            lines += s
        new = []
        for c, n in zip(carries, local):
            e = self.expr(inner, env[c]) if self.rng.random() < 0.8 else n
            v = self.fresh("n")
            lines.append(f"{v} = {e}")
            inner[v] = env[c]
            new.append(v)
        return lines, new

    def fori(self, env: dict, depth: int) -> list:
        rng = self.rng
        carries = self._carries(env)
        fn, i = self.fresh("loop"), self.fresh("i")
        body, new = self._body(env, depth, carries, {i: "int32"})
        lo = rng.randint(0, 2)
        hi = lo + rng.randint(0, 5)
        if rng.random() < 0.3 and "int32" in env.values():  # a trip count computed at run time
            hi = f"{lo} + ({self.pick(env, 'int32')} & 3)"
        unroll = rng.choice(["", "", ", unroll=2"]) if isinstance(hi, int) else ""
        lines = [f"def {fn}({i}, carry):", *(f"    {x}" for x in body)]
        lines.append(f"    return ({', '.join(new)}{',' if len(new) == 1 else ''})")
        results = [self.fresh() for _ in carries]
        init = f"({', '.join(carries)}{',' if len(carries) == 1 else ''})"
        target = f"{', '.join(results)}{',' if len(results) == 1 else ''}" if results else "_"
        lines.append(f"{target} = lax.fori_loop({lo}, {hi}, {fn}, {init}{unroll})")
        for r, c in zip(results, carries):
            env[r] = env[c]
        return lines

    def while_(self, env: dict, depth: int) -> list:
        carries = self._carries(env)
        fn, cond = self.fresh("body"), self.fresh("cond")
        k = self.fresh("k")
        limit = self.rng.randint(0, 4)
        body, new = self._body(env, depth, carries, {})
        lines = [f"def {cond}(state):", f"    return state[0] < {limit}"]
        lines += [f"def {fn}(state):", f"    {k}, carry = state", *(f"    {x}" for x in body)]
        lines.append(f"    return {k} + 1, ({', '.join(new)}{',' if len(new) == 1 else ''})")
        results = [self.fresh() for _ in carries]
        init = f"({', '.join(carries)}{',' if len(carries) == 1 else ''})"
        target = f"{', '.join(results)}{',' if len(results) == 1 else ''}" if results else "_"
        lines.append(f"_, ({target}) = lax.while_loop({cond}, {fn}, (jnp.int32(0), {init}))")
        for r, c in zip(results, carries):
            env[r] = env[c]
        return lines

    def cond(self, env: dict, depth: int) -> list:
        dtype = self.rng.choice(["int32", "uint32", "float32"])
        pred = self.pick(env, "bool")
        branches, lines, results = [], [], []
        for _ in range(2):
            fn = self.fresh("branch")
            inner = dict(env)
            body = []
            for s in self.block(inner, depth + 1, self.rng.randint(0, 2)):
                body += s
            results.append(self.expr(inner, dtype))
            lines += [f"def {fn}():", *(f"    {x}" for x in body), f"    return {results[-1]}"]
            branches.append(fn)
        name = self.fresh()
        lines.append(f"{name} = lax.cond({pred}, {branches[0]}, {branches[1]})")
        env[name] = dtype
        return lines

    def when(self, env: dict, depth: int) -> list:
        pred = self.pick(env, "bool")
        inner = dict(env)
        body = []
        for s in self.block(inner, depth + 1, self.rng.randint(1, 2)):
            body += s
        body += self.store(inner)
        fn = self.fresh("when")
        return [f"@pl.when({pred})", f"def {fn}():", *(f"    {x}" for x in body)]


def generate(rng) -> ScalarKernel:
    n_in, n_out = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2, 4, 8])
    g = _Gen(rng, n_in, n_out)
    env: dict = {}
    first = []
    for _ in range(rng.randint(1, 3)):
        name = g.fresh()
        first.append(Stmt((f"{name} = s_ref[{rng.randrange(n_in)}]",)))
        env[name] = "int32"
    stmts = first + [Stmt(tuple(lines)) for lines in g.block(env, 0, rng.randint(2, 8))]
    # Every top-level value ends in an output (so none is dead code): its
    # bits xor-ed into one of them.
    outs = []
    for k, (name, dtype) in enumerate(env.items()):
        bits = (
            f"lax.bitcast_convert_type({name}, jnp.int32)"
            if dtype in ("uint32", "float32")
            else f"{name}.astype(jnp.int32)"
        )
        outs.append(Stmt((f"o_ref[{k % n_out}] = o_ref[{k % n_out}] ^ {bits}",)))
    return ScalarKernel(n_in, n_out, tuple(stmts + outs), rng.randrange(1 << 30))
