"""Category "elementwise": one block per operand, no grid; the kernel loads
every operand whole, runs a random straight-line program over them
(`array_ops`) and stores its outputs whole. Meaning: the same program in
eager jax, one primitive at a time (`jax.disable_jit`), so no fusion can
change an integer's wrapping or a float's rounding.
"""

from __future__ import annotations

import dataclasses

from fuzzing import array_ops
from fuzzing.straight_line import Program
from fuzzing.values import FLOATS, INTS, OPERAND_DTYPES, Aval, dt, shape_text


@dataclasses.dataclass(frozen=True)
class Elementwise:
    program: Program
    seeds: tuple  # per input: its data seed
    special: bool  # NaN / inf / edge values in the inputs
    category: str = "elementwise"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise"}

    def render(self) -> str:
        p = self.program
        avals = p.avals()
        args = "".join(
            f"\n    make_input({s}, {shape_text(a.shape)}, {a.dtype!r}, special={self.special}),"
            for s, (_, a) in zip(self.seeds, p.inputs)
        )
        refs = [f"{n}_ref" for n, _ in p.inputs] + [f"o{k}_ref" for k in range(len(p.outputs))]
        loads = ", ".join(f"{n}_ref[...]" for n, _ in p.inputs)
        stores = "\n".join(f"    o{k}_ref[...] = outs[{k}]" for k in range(len(p.outputs)))
        outs = ", ".join(f"jax.ShapeDtypeStruct({shape_text(avals[o].shape)}, {dt(avals[o].dtype)})" for o in p.outputs)
        return f"""
ARGS = ({args}
)

{p.body("body")}


{p.body("body_outside", meaning=True)}


def kernel({", ".join(refs)}):
    outs = body({loads})
{stores}


def run(params):
    return pl.pallas_call(kernel, out_shape=[{outs}], interpret=params)(*ARGS)


def meaning():
    with jax.disable_jit():
        return [np.asarray(v) for v in body_outside(*[jnp.asarray(a) for a in ARGS])]


def compiled_meaning():
    return [np.asarray(v) for v in jax.jit(body_outside)(*ARGS)]
"""

    def shrinks(self):
        for p in self.program.shrinks():
            yield _with_inputs(self, p)
        if self.special:
            yield dataclasses.replace(self, special=False)


def _with_inputs(spec: Elementwise, p: Program) -> Elementwise:
    """``spec`` with program ``p``: unused operands dropped, seeds kept by name."""
    old = dict(zip((n for n, _ in spec.program.inputs), spec.seeds))
    used = p.used_inputs()
    inputs = tuple((n, a) for n, a in p.inputs if n in used)
    seeds = tuple(old.get(n, 1000 + i) for i, (n, _) in enumerate(inputs))
    return dataclasses.replace(spec, program=dataclasses.replace(p, inputs=inputs), seeds=seeds)


def generate(rng) -> Elementwise:
    shape = rng.choice(array_ops.main_shapes())
    main = rng.choice(FLOATS + INTS + FLOATS + ("int32", "uint32", "int8"))
    dtypes = tuple(sorted({main, rng.choice(OPERAND_DTYPES), rng.choice(FLOATS + INTS)}))
    inputs = []
    for i in range(rng.randint(1, 3)):
        d = main if i == 0 or rng.random() < 0.5 else rng.choice(dtypes + ("bool", "int4"))
        s = shape if i == 0 or rng.random() < 0.5 else array_ops._variant(rng, shape)
        inputs.append((f"x{i}", Aval(tuple(s), d)))
    avals = dict(inputs)
    stmts = []
    # int4 operands compute as int32 (the TPU computes in 4 bits only packed).
    for n, a in inputs:
        if a.dtype == "int4":
            st = array_ops.Stmt(f"w{n}", "{0}.astype(jnp.int32)", (n,), Aval(a.shape, "int32"))
            stmts.append(st)
            avals[st.name] = st.aval
    visible = {n: a for n, a in avals.items() if a.dtype != "int4"}
    target = rng.randint(1, 12)
    varying = set(visible)  # (the operands as loaded)
    tries = 0
    while len(stmts) < target + len(inputs) and tries < 200:
        tries += 1
        st = array_ops.random_stmt(rng, visible, f"v{len(stmts)}", shape, dtypes + ("bool",), varying)
        if st is not None:
            stmts.append(st)
            avals[st.name] = visible[st.name] = st.aval
    # Outputs: the last statement and maybe one or two others not read yet.
    read = {a for s in stmts for a in s.args}
    candidates = [s.name for s in stmts if s.name not in read and s.aval.dtype != "int4"]
    outputs = list(dict.fromkeys([stmts[-1].name] + rng.sample(candidates, min(len(candidates), rng.randint(0, 2)))))
    final = []
    for o in outputs:
        extra = array_ops.as_output(o, avals[o], f"{o}_out")
        if extra is not None:
            stmts.append(extra)
            avals[extra.name] = extra.aval
            o = extra.name
        final.append(o)
    program = Program(tuple(inputs), tuple(stmts), tuple(final)).pruned()
    spec = Elementwise(program, tuple(rng.randrange(1 << 30) for _ in inputs), special=rng.random() < 0.6)
    return _with_inputs(spec, spec.program)
