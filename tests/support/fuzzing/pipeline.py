"""Category "pipeline": `pltpu.emit_pipeline` inside a kernel over HBM
operands (`pl.ANY`), with random grids and BlockSpecs: blocked tiles over
rows and columns, `pl.Element` row offsets, and `pl.BoundedSlice` row blocks
of traced starts and sizes (from SMEM operands) written in place (the
output aliases the input). The body is a random elementwise program over a
block (`array_ops`); with bounded blocks it stays row-local, since rows
past a block's size are undefined. Meaning: numpy, block by block.
"""

from __future__ import annotations

import dataclasses

from fuzzing import array_ops
from fuzzing.straight_line import Program
from fuzzing.values import Aval, dt, kind, literal

_DTYPES = ("float32", "int32", "bfloat16", "uint32", "int16")


@dataclasses.dataclass(frozen=True)
class PipelineKernel:
    rows: int
    cols: int
    dtype: str
    block: tuple  # (rows, cols) of a block
    form: str  # "blocked" / "element" / "bounded"
    grid: tuple
    starts: tuple  # element / bounded: per grid step i, its first row
    sizes: tuple  # bounded: per grid step i, its rows
    program: Program  # "x" -> [y] of the block's type
    mode: str
    seed: int
    category: str = "pipeline"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise", "dma_execution_mode": self.mode}

    def render(self) -> str:
        bm, bc = self.block
        r, c = self.rows, self.cols
        if self.form == "blocked":
            spec = f"pl.BlockSpec(({bm}, {bc}), lambda i, j: (i, j))"
            out_spec = spec
        elif self.form == "element":
            spec = f"pl.BlockSpec((pl.Element({bm}), {bc}), lambda i, j: (starts_ref[i], j))"
            out_spec = f"pl.BlockSpec(({bm}, {bc}), lambda i, j: (i, j))"
        else:
            spec = f"pl.BlockSpec((pl.BoundedSlice({bm}), {bc}), lambda i, j: (pl.ds(starts_ref[i], sizes_ref[i]), j))"
            out_spec = spec
        in_place = self.form == "bounded"
        out_rows = r if self.form != "element" else bm * self.grid[0]
        return f"""
ARGS = (
    np.asarray({list(self.starts) or [0]}, np.int32),
    np.asarray({list(self.sizes) or [0]}, np.int32),
    make_input({self.seed}, ({r}, {c}), {self.dtype!r}, special=False),
)
OUT_SHAPE = jax.ShapeDtypeStruct(({out_rows}, {c}), {dt(self.dtype)})


{self.program.body("work")}


{self.program.body("work_outside", meaning=True)}


def kernel(starts_ref, sizes_ref, x_hbm, o_hbm):
    def body(x_vmem, o_vmem):
        o_vmem[...] = work(x_vmem[...])[0]

    pltpu.emit_pipeline(body, grid={self.grid}, in_specs=[{spec}], out_specs=[{out_spec}])(x_hbm, o_hbm)


def run(params):
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    call = pl.pallas_call(
        kernel,
        out_shape=OUT_SHAPE,
        in_specs=[smem, smem, pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        {"input_output_aliases={2: 0}," if in_place else ""}
        interpret=params,
    )
    # emit_pipeline asks for the chip's tiling through the abstract mesh.
    tpu = jax.sharding.AbstractMesh((), (), abstract_device=jax.sharding.AbstractDevice("TPU v5e", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(tpu):
        return [jax.jit(call)(*[jnp.asarray(a) for a in ARGS])]


def meaning():
    starts, sizes, x = ARGS
    out = np.array(x) if {in_place} else np.zeros(({out_rows}, {c}), x.dtype)
    with jax.disable_jit():
        for i in range({self.grid[0]}):
            for j in range({self.grid[1]}):
                cols = slice(j * {bc}, (j + 1) * {bc})
                if {self.form!r} == "blocked":
                    src = dst = slice(i * {bm}, (i + 1) * {bm})
                elif {self.form!r} == "element":
                    src, dst = slice(starts[i], starts[i] + {bm}), slice(i * {bm}, (i + 1) * {bm})
                else:
                    src = dst = slice(starts[i], starts[i] + sizes[i])
                block = np.asarray(work_outside(jnp.asarray(np.array(x)[src, cols]))[0])
                out[dst, cols] = block
    return [out]
"""

    def shrinks(self):
        for p in self.program.shrinks(lambda a: False):
            if p.outputs and p.avals()[p.outputs[0]] == self.program.avals()[self.program.outputs[0]]:
                yield dataclasses.replace(self, program=p)
        if self.mode == "on_wait":
            yield dataclasses.replace(self, mode="eager")


def generate(rng) -> PipelineKernel:
    dtype = rng.choice(_DTYPES)
    bm = rng.choice([8, 16])
    bc = rng.choice([128, 256])
    gj = rng.choice([1, 2])
    cols = bc * gj
    form = rng.choice(["blocked", "blocked", "element", "bounded"])
    starts, sizes = (), ()
    if form == "blocked":
        gi = rng.choice([1, 2, 3])
        rows = bm * gi
    elif form == "element":
        gi = rng.choice([1, 2, 3])
        rows = bm * rng.choice([2, 3, 4])
        starts = tuple(rng.randrange(rows - bm + 1) for _ in range(gi))
    else:
        # Disjoint row windows of multiples of 8 rows (no tiling round-up),
        # in any order; the rows no window names keep the input's values.
        gi = rng.choice([1, 2, 3, 4])
        rows = bm * (gi + rng.choice([0, 1]))
        slots = list(range(0, rows, bm))
        rng.shuffle(slots)
        starts = tuple(slots[:gi])
        sizes = tuple(rng.choice([s for s in (8, 16) if s <= bm]) for _ in range(gi))
    block = Aval((bm, bc), dtype)
    avals, stmts, varying = {"x": block}, [], {"x"}
    for _ in range(40):
        if len(stmts) >= rng.randint(1, 4):
            break
        st = array_ops.random_stmt(rng, avals, f"t{len(stmts)}", block.shape, (dtype,), varying)
        if st is None or st.aval.shape != block.shape:
            continue
        if form == "bounded" and any(
            w in st.expr for w in ("sum", "max(", "min(", "prod", "roll", ".T", "[", "any", "all")
        ):
            continue  # (row-local only: rows past a window's size are undefined)
        stmts.append(st)
        avals[st.name] = st.aval
    last = stmts[-1].name if stmts else "x"
    if avals[last].dtype != dtype:
        st = array_ops.Stmt(f"t{len(stmts)}", f"{{0}}.astype({dt(dtype)})", (last,), block)
        stmts.append(st)
        last = st.name
    if last == "x":  # at least one operation
        op = "+" if kind(dtype) != "b" else "^"
        st = array_ops.Stmt("t0", f"{{0}} {op} {literal(rng, dtype, nonzero=True)}", ("x",), block)
        stmts, last = [st], "t0"
    program = Program((("x", block),), tuple(stmts), (last,)).pruned()
    return PipelineKernel(
        rows,
        cols,
        dtype,
        (bm, bc),
        form,
        (gi, gj),
        starts,
        sizes,
        program,
        rng.choice(["eager", "on_wait"]),
        rng.randrange(1 << 30),
    )
