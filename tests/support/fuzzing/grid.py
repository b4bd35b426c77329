"""Category "grid": pallas_calls over a grid of 1 to 3 dimensions with random
BlockSpecs: blocks that divide their arrays, squeezed (None) and element
(`pl.Element`) dimensions, index maps that permute, reverse, pin or gather
blocks (through a scalar-prefetch operand) with input revisits in any
order, outputs revisited over trailing reduction dimensions (accumulated
under `pl.when(program_id == 0)`) or, with leading ones, at any step
(`pl.Buffered(1, revisit=pl.RevisitMode.ANY)`), dimension semantics (parallel prefixes)
and several cores (`num_cores_or_threads`). The kernel body is a random
straight-line program over the blocks (`array_ops`). Meaning: the kernel
itself over numpy blocks, grid point by grid point (`fakes.meaning_call`).
"""

from __future__ import annotations

import dataclasses
import math

from fuzzing import array_ops
from fuzzing.straight_line import Program
from fuzzing.values import Aval, dt, kind, shape_text

_DTYPES = ("float32", "int32", "uint32", "bfloat16", "int8", "int16")
_BLOCKS = [(8, 128), (16, 128), (8, 256), (1, 128), (2, 8, 128), (32, 128)]


@dataclasses.dataclass(frozen=True)
class Operand:
    name: str
    array: tuple  # the array's shape
    dtype: str
    block: tuple  # block shape as source text pieces ("8", "None", "pl.Element(8)")
    index_map: str  # a lambda's body over the grid indices (and "s" when prefetching)


@dataclasses.dataclass(frozen=True)
class GridKernel:
    grid: tuple
    semantics: tuple  # per grid dimension, "parallel" / "arbitrary"
    prefetch: tuple  # scalar-prefetch values (int32), () for none
    inputs: tuple  # Operand, ...
    output: Operand
    reduce_dims: tuple  # grid dims the output is revisited over
    program: Program  # over the input blocks ("x0", ...): one output "r"
    use_program_id: bool
    cores: int
    seeds: tuple
    special: bool
    category: str = "grid"
    # The reduction dims lead the grid, so the output's blocks are revisited
    # at any step: pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY).
    revisit_any: bool = False

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        k = {"out_of_bounds_reads": "raise"}
        if self.cores > 1:
            k["num_cores_or_threads"] = self.cores
        return k

    def uses_fakes(self) -> bool:
        return True

    def render(self) -> str:
        idx = [f"i{d}" for d in range(len(self.grid))]
        params = ", ".join(idx + (["s_ref"] if self.prefetch else []))
        maps, specs = [], []
        for op in (*self.inputs, self.output):
            maps.append(f"def {op.name}_map({params}):\n    return ({op.index_map},)")
            specs.append(f"({shape_text_raw(op.block)}, {op.name}_map)")
        args = "".join(
            f"\n    make_input({s}, {shape_text(op.array)}, {op.dtype!r}, special={self.special}),"
            for s, op in zip(self.seeds, self.inputs)
        )
        pre = f"\n    np.asarray({list(self.prefetch)}, np.int32)," if self.prefetch else ""
        refs = (["s_ref"] if self.prefetch else []) + [f"{op.name}_ref" for op in self.inputs] + ["o_ref"]
        loads = ", ".join(f"{op.name}_ref[...]" for op in self.inputs)
        o = self.output
        lines = [f"    r = body({loads})[0]"]
        if self.use_program_id:
            pid = " + ".join(f"pl.program_id({d})" for d in range(len(self.grid)))
            lines.append(f"    r = r + ({pid}).astype(r.dtype)")
        value = f"r.astype({dt(o.dtype)})"
        if self.reduce_dims:
            first = " & ".join(f"(pl.program_id({d}) == 0)" for d in self.reduce_dims)
            lines += [
                f"    @pl.when({first})",
                "    def _init():",
                f"        o_ref[...] = jnp.zeros(o_ref.shape, {dt(o.dtype)})",
                f"    o_ref[...] += {value}",
            ]
        else:
            lines.append(f"    o_ref[...] = {value}")
        specs_in = ", ".join(f"pl.BlockSpec({shape_text_raw(op.block)}, {op.name}_map)" for op in self.inputs)
        mode = ", pipeline_mode=pl.Buffered(1, revisit=pl.RevisitMode.ANY)" if self.revisit_any else ""
        spec_out = f"pl.BlockSpec({shape_text_raw(o.block)}, o_map{mode})"
        grid_spec = (
            f"pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid={self.grid},"
            f" in_specs=[{specs_in}], out_specs={spec_out})"
        )
        if not self.prefetch:
            grid_spec = None
        call_args = (
            f"grid_spec={grid_spec}" if grid_spec else f"grid={self.grid}, in_specs=[{specs_in}], out_specs={spec_out}"
        )
        nl = "\n"
        return f"""
ARGS = ({pre}{args}
)
OUT_SHAPE = jax.ShapeDtypeStruct({shape_text(o.array)}, {dt(o.dtype)})


{(nl * 3).join(maps)}


{self.program.body("body")}


{self.program.body("body_outside", meaning=True)}


def kernel({", ".join(refs)}):
{nl.join(lines)}


def run(params):
    return pl.pallas_call(
        kernel,
        out_shape=OUT_SHAPE,
        {call_args},
        compiler_params=pltpu.CompilerParams(dimension_semantics={self.semantics!r}),
        interpret=params,
    )(*ARGS)


def meaning():
    return meaning_call(
        kernel,
        ARGS,
        [OUT_SHAPE],
        grid={self.grid},
        in_specs=[{", ".join(specs[:-1])}],
        out_specs=[{specs[-1]}],
        prefetch={1 if self.prefetch else 0},
        replace={{"body": body_outside}},
        reload_outputs={self.revisit_any},
    )
"""

    def shrinks(self):
        for p in self.program.shrinks(lambda a: False):
            if p.outputs and p.used_inputs() == {op.name for op in self.inputs}:
                yield dataclasses.replace(self, program=p)
        if self.use_program_id:
            yield dataclasses.replace(self, use_program_id=False)
        if self.cores > 1:
            yield dataclasses.replace(self, cores=1)
        if self.special:
            yield dataclasses.replace(self, special=False)


def shape_text_raw(parts) -> str:
    return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"


def _block_dim_size(text: str) -> int:
    if text == "None":
        return 1
    if text.startswith("pl.Element("):
        return int(text[len("pl.Element(") : -1])
    return int(text)


def generate(rng) -> GridKernel:
    block = rng.choice(_BLOCKS)
    rank = len(block)
    # The output: its block counts per dimension are the leading grid dims
    # (maybe permuted); trailing grid dims are reductions it is revisited over.
    counts = [rng.choice([1, 2, 3]) for _ in range(rank)]
    out_dims = [d for d in range(rank) if counts[d] > 1 or rng.random() < 0.3]
    rng.shuffle(out_dims)
    n_reduce = rng.choice([0, 0, 1]) if len(out_dims) < 3 else 0
    reduce_counts = [rng.choice([2, 3]) for _ in range(n_reduce)]
    # Reductions leading the grid revisit each output block once per
    # reduction step, other blocks between: only with RevisitMode.ANY.
    revisit_any = bool(n_reduce and any(counts[d] > 1 for d in out_dims) and rng.random() < 0.25)
    lead = n_reduce if revisit_any else 0
    grid = tuple(
        reduce_counts + [counts[d] for d in out_dims] if revisit_any else [counts[d] for d in out_dims] + reduce_counts
    )
    if not grid:
        grid = (rng.choice([1, 2, 3]),)
        n_reduce = 1
    reduce_dims = tuple(range(n_reduce)) if revisit_any else tuple(range(len(grid) - n_reduce, len(grid)))
    nd = len(grid)
    prefetch = ()
    if rng.random() < 0.3:
        prefetch = tuple(rng.randrange(4) for _ in range(max(grid)))
    squeeze_lead = rank == 3 and rng.random() < 0.4
    out_block = ["None" if squeeze_lead and d == 0 else str(block[d]) for d in range(rank)]
    out_map = []
    for d in range(rank):
        out_map.append(f"i{lead + out_dims.index(d)}" if d in out_dims else "0")
    # Every element written (a squeezed dim's block is one row): rows no
    # block covers would hold whatever the TPU left there.
    out_array = tuple(_block_dim_size(out_block[d]) * (counts[d] if d in out_dims else 1) for d in range(rank))
    dtypes = [rng.choice(_DTYPES)]
    out_dtype = rng.choice(["float32", "int32", "uint32", dtypes[0]])
    if n_reduce and kind(out_dtype) not in "fiu":
        out_dtype = "int32"
    output = Operand("o", out_array, out_dtype, tuple(out_block), ", ".join(out_map))

    inputs = []
    for k in range(rng.randint(1, 3)):
        dtype = dtypes[0] if k == 0 or rng.random() < 0.5 else rng.choice(_DTYPES)
        nblocks = [rng.choice([1, 2, 3, 4]) for _ in range(rank)]
        bmap, bshape = [], []
        for d in range(rank):
            n = nblocks[d]
            i = f"i{rng.randrange(nd)}"
            forms = [f"{i} % {n}", f"({n} - 1 - {i} % {n})", "0", f"({i} + 1) % {n}"]
            if prefetch:
                forms.append(f"s_ref[{i}] % {n}")
            bmap.append(rng.choice(forms) if n > 1 else "0")
            bshape.append(str(block[d]))
        if squeeze_lead:
            bshape[0] = "None"
        elif rng.random() < 0.15:  # an element-offset row block
            d = rank - 2
            rows = block[d] * nblocks[d]
            i = f"i{rng.randrange(nd)}"
            step = rng.choice([1, 3, block[d] // 2 or 1])
            span = rows - block[d] + 1
            bmap[d] = f"({i} * {step}) % {span}"
            bshape[d] = f"pl.Element({block[d]})"
        array = tuple(block[d] * nblocks[d] for d in range(rank))
        inputs.append(Operand(f"x{k}", array, dtype, tuple(bshape), ", ".join(bmap)))

    kshape = tuple(_block_dim_size(b) for b in output.block if b != "None")
    prog_inputs = tuple((op.name, Aval(kshape, op.dtype)) for op in inputs)
    avals = dict(prog_inputs)
    stmts = []
    names = set(avals)
    varying = set(avals)
    for _ in range(rng.randint(1, 6)):
        st = array_ops.random_stmt(
            rng, avals, f"v{len(stmts)}", kshape, tuple(dict.fromkeys(dtypes + [out_dtype])), varying
        )
        if st is not None and st.aval.shape == kshape or (st is not None and math.prod(st.aval.shape) == 1):
            stmts.append(st)
            avals[st.name] = st.aval
    # The result: the last full-shape value, made to read every input.
    full = [s for s in stmts if s.aval.shape == kshape and kind(s.aval.dtype) in "fiub"]
    last = full[-1].name if full else prog_inputs[0][0]
    unread = [n for n in names if n != last and not any(n in s.args for s in stmts)]
    for n in unread:  # fold the others in so every operand is live
        st = array_ops.Stmt(f"v{len(stmts)}", "{0} + {1}.astype({0}.dtype)", (last, n), avals[last])
        if kind(avals[last].dtype) == "b":
            st = array_ops.Stmt(f"v{len(stmts)}", "{0} ^ ({1} != 0)", (last, n), avals[last])
        stmts.append(st)
        avals[st.name] = st.aval
        last = st.name
    program = Program(prog_inputs, tuple(stmts), (last,)).pruned()
    semantics = []
    for d in range(nd):
        parallel = d not in reduce_dims and all(s == "parallel" for s in semantics) and rng.random() < 0.6
        semantics.append("parallel" if parallel else "arbitrary")
    cores = 2 if semantics and semantics[0] == "parallel" and rng.random() < 0.3 else 1
    return GridKernel(
        grid,
        tuple(semantics),
        prefetch,
        tuple(inputs),
        output,
        reduce_dims,
        program,
        rng.random() < 0.3,
        cores,
        tuple(rng.randrange(1 << 30) for _ in inputs),
        rng.random() < 0.3,
        revisit_any=revisit_any,
    )
