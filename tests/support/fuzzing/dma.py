"""Category "dma": local DMAs between HBM operands (`pl.ANY`), VMEM scratch
and outputs, in phases: each phase starts several copies (several on one
semaphore), then waits for all of them in a random order (sometimes through
a fresh descriptor of the same size), then computes on VMEM scratch. Regions
are `.at[...]` slices with static and traced starts (from an SMEM operand),
integer indices, zero sizes, and now and then `bitcast` / `reshape` views.
Copies in flight at once never write what another one reads or writes, so
the result does not depend on their order, in either `dma_execution_mode`.
Meaning: the kernel itself over numpy refs (a copy moves its bytes at its
start: nothing reads a destination before its wait).
"""

from __future__ import annotations

import dataclasses

from fuzzing.values import dt, literal, shape_text

_DTYPES = ("float32", "int32", "bfloat16", "int8", "uint32", "int16")


@dataclasses.dataclass(frozen=True)
class Buffer:
    name: str
    kind: str  # "in" (HBM operand), "out" (HBM output), "vmem" (scratch)
    shape: tuple
    dtype: str


@dataclasses.dataclass(frozen=True)
class Step:
    lines: tuple
    keep: bool = False


@dataclasses.dataclass(frozen=True)
class DmaKernel:
    buffers: tuple
    n_sems: int
    starts: tuple
    steps: tuple
    mode: str
    seeds: tuple
    ours_tpu: bool = False  # mosaic_rt runs in its "tpu" DMA mode
    category: str = "dma"

    def devices(self) -> int:
        return 1

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise", "dma_execution_mode": self.mode}

    def our_knobs(self) -> dict:
        # mosaic_rt's "tpu" mode (copies to another core land at its next
        # synchronisation point) must give what stock's modes give.
        return {"dma_execution_mode": "tpu"} if self.ours_tpu else {}

    def uses_fakes(self) -> bool:
        return True

    def _of(self, kind):
        return [b for b in self.buffers if b.kind == kind]

    def render(self) -> str:
        ins, outs, vm = self._of("in"), self._of("out"), self._of("vmem")
        args = "".join(
            f"\n    make_input({s}, {shape_text(b.shape)}, {b.dtype!r}, special=False),"
            for s, b in zip(self.seeds, ins)
        )
        refs = ["idx_ref"] + [b.name for b in (*ins, *outs, *vm)] + ["sems"]
        body = "\n".join(f"    {line}" for st in self.steps for line in st.lines)
        out_shapes = ", ".join(f"jax.ShapeDtypeStruct({shape_text(b.shape)}, {dt(b.dtype)})" for b in outs)
        scratch = [f"pltpu.VMEM({shape_text(b.shape)}, {dt(b.dtype)})" for b in vm]
        scratch.append(f"pltpu.SemaphoreType.DMA(({self.n_sems},))")
        return f"""
ARGS = (
    np.asarray({list(self.starts)}, np.int32),{args}
)
OUT_SHAPES = [{out_shapes}]
SCRATCH = [{", ".join(scratch)}]


def kernel({", ".join(refs)}):
{body}


def run(params):
    return pl.pallas_call(
        kernel,
        out_shape=OUT_SHAPES,
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)] + [pl.BlockSpec(memory_space=pl.ANY)] * {len(ins)},
        out_specs=[pl.BlockSpec(memory_space=pl.ANY)] * {len(outs)},
        scratch_shapes=SCRATCH,
        interpret=params,
    )(*ARGS)


def meaning():
    return meaning_call(kernel, ARGS, OUT_SHAPES, scratch=SCRATCH)
"""

    def shrinks(self):
        for k in reversed(range(len(self.steps))):
            if not self.steps[k].keep:
                yield dataclasses.replace(self, steps=self.steps[:k] + self.steps[k + 1 :])
        if self.ours_tpu:
            yield dataclasses.replace(self, ours_tpu=False)
        if self.mode == "on_wait":
            yield dataclasses.replace(self, mode="eager")


def _overlap(a, b) -> bool:
    """Whether two (buffer, box) accesses may touch the same element (a box
    of None: the whole buffer)."""
    if a[0] != b[0]:
        return False
    if a[1] is None or b[1] is None:
        return True
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a[1], b[1]))


class _Gen:
    def __init__(self, rng, buffers):
        self.rng, self.buffers = rng, buffers
        self.starts: list = []
        self.n = 0

    def start(self, lo, hi, traced_ok=True) -> str:
        v = self.rng.randint(lo, hi)
        if traced_ok and self.rng.random() < 0.4:
            self.starts.append(v)
            return f"idx_ref[{len(self.starts) - 1}]"
        return str(v)

    def region(self, b: Buffer, shape=None):
        """(source text of a ref of ``b``, the shape it has, its box over
        ``b``); ``shape``: the shape it must have (None: any)."""
        rng = self.rng
        if shape is None and rng.random() < 0.2:
            return b.name, b.shape, tuple((0, n) for n in b.shape)
        if shape is None:
            rows = rng.choice([0, 1, 2, 4, b.shape[-2], b.shape[-2] // 2 or 1])
            cols = rng.choice([b.shape[-1], 128]) if b.shape[-1] % 128 == 0 else b.shape[-1]
            lead = len(b.shape) - 2
            shape = (rows, cols)
            ints = [rng.randrange(n) for n in b.shape[:lead]]
        else:
            lead = len(b.shape) - len(shape)
            if lead < 0 or any(s > n for s, n in zip(shape, b.shape[lead:])):
                return None
            ints = [rng.randrange(n) for n in b.shape[:lead]]
        parts, box = [], []
        for d, n in enumerate(b.shape):
            if d < lead:
                parts.append(self.start(ints[d], ints[d]))
                box.append((ints[d], ints[d] + 1))
                continue
            w = shape[d - lead]
            last = d == len(b.shape) - 1
            if w == n and rng.random() < 0.6:
                parts.append(":")
                box.append((0, n))
                continue
            step = 128 if last else 1
            # (a start at the end is out of bounds even for zero elements)
            s = rng.randrange(0, (n - max(w, 1)) // step + 1) * step
            text = self.start(s, s, traced_ok=not last)
            parts.append(f"pl.ds({text}, {w})")
            box.append((s, s + w))
        return f"{b.name}.at[{', '.join(parts)}]", tuple(shape), tuple(box)

    def view(self, b: Buffer):
        """A bitcast or reshape view of the whole of ``b`` as (text, shape,
        dtype), or None."""
        rng = self.rng
        if len(b.shape) != 2:
            return None
        if rng.random() < 0.5 and b.dtype in ("float32", "int32", "uint32"):
            to = rng.choice(["int16", "int8", "uint32", "int32"])
            f = {"int16": 2, "int8": 4}.get(to, 1)
            return f"{b.name}.bitcast({dt(to)})", (b.shape[0] * f, b.shape[1]), to
        if b.shape[0] % 2 == 0 and b.shape[0] > 2:
            return f"{b.name}.reshape(2, {b.shape[0] // 2}, {b.shape[1]})", (2, b.shape[0] // 2, b.shape[1]), b.dtype
        return None

    def copy(self, busy: list, views: bool):
        """One copy: (src text, dst text, box accesses), or None. ``busy``:
        the accesses of copies in flight (none may overlap a destination)."""
        rng = self.rng
        srcs = [b for b in self.buffers if b.kind in ("in", "vmem", "out")]
        dsts = [b for b in self.buffers if b.kind in ("vmem", "out")]
        src, dst = rng.choice(srcs), rng.choice(dsts)
        if src is dst:
            return None
        if views and rng.random() < 0.3:
            v = self.view(src)
            if v is None:
                return None
            text, shape, dtype = v
            if dtype != dst.dtype:
                return None
            got = self.region(dst, shape)
            if got is None:
                return None
            d_text, _, d_box = got
            access = [(src.name, None, "r"), (dst.name, d_box, "w")]
            s_text = text
        else:
            if src.dtype != dst.dtype:
                return None
            got = self.region(src)
            s_text, shape, s_box = got
            got = self.region(dst, shape)
            if got is None:
                return None
            d_text, _, d_box = got
            access = [(src.name, s_box, "r"), (dst.name, d_box, "w")]
        for a in access:
            for b in busy:
                if (a[2] == "w" or b[2] == "w") and _overlap(a[:2], b[:2]):
                    return None
        return s_text, d_text, access


def generate(rng) -> DmaKernel:
    rows = rng.choice([8, 16, 24, 32])
    cols = rng.choice([128, 256])
    dtypes = [rng.choice(_DTYPES)]
    if rng.random() < 0.4:
        dtypes.append(rng.choice(_DTYPES))
    buffers = []
    for k in range(rng.randint(1, 2)):
        buffers.append(Buffer(f"x{k}_hbm", "in", (rows, cols), rng.choice(dtypes)))
    for k in range(rng.randint(1, 2)):
        buffers.append(Buffer(f"o{k}_hbm", "out", (rows, cols), rng.choice(dtypes)))
    for k in range(rng.randint(1, 3)):
        shape = (rows, cols) if rng.random() < 0.7 else (rng.choice([2, 3]), rows, cols)
        buffers.append(Buffer(f"s{k}", "vmem", shape, rng.choice(dtypes)))
    n_sems = rng.randint(1, 3)
    g = _Gen(rng, buffers)
    views = rng.random() < 0.1
    steps = []
    # Every scratch buffer and output starts filled (by stores, then a copy).
    for b in buffers:
        if b.kind == "vmem":
            steps.append(
                Step(
                    (f"{b.name}[...] = jnp.full({shape_text(b.shape)}, {literal(rng, b.dtype)}, {dt(b.dtype)})",), True
                )
            )
    n = 0
    for b in buffers:
        if b.kind == "out":
            fill = next((s for s in buffers if s.kind == "vmem" and s.shape == b.shape and s.dtype == b.dtype), None)
            n += 1
            if fill is None:
                # A whole-buffer copy from VMEM, through a scoped buffer.
                shape, dtype = shape_text(b.shape), dt(b.dtype)
                lines = [
                    f"def fill{n}(tmp, sem):",
                    f"    tmp[...] = jnp.full({shape}, {literal(rng, b.dtype)}, {dtype})",
                ]
                if rng.random() < 0.5:
                    lines.append(f"    pltpu.sync_copy(tmp, {b.name})")
                else:
                    lines += [f"    c = pltpu.make_async_copy(tmp, {b.name}, sem)", "    c.start()", "    c.wait()"]
                lines.append(f"pl.run_scoped(fill{n}, pltpu.VMEM({shape}, {dtype}), pltpu.SemaphoreType.DMA)")
                steps.append(Step(tuple(lines), True))
            else:
                steps.append(
                    Step(
                        (
                            f"c_fill{n} = pltpu.make_async_copy({fill.name}, {b.name}, sems.at[0])",
                            f"c_fill{n}.start()",
                            f"c_fill{n}.wait()",
                        ),
                        True,
                    )
                )
    copies = 0
    for _phase in range(rng.randint(1, 4)):
        busy: list = []
        started = []
        for _ in range(rng.randint(1, 4)):
            got = None
            for _try in range(10):
                got = g.copy(busy, views)
                if got:
                    break
            if not got:
                continue
            s_text, d_text, access = got
            busy += access
            copies += 1
            sem = rng.randrange(n_sems)
            name = f"c{copies}"
            started.append((name, s_text, d_text, sem))
        if not started:
            continue
        lines = []
        for name, s_text, d_text, sem in started:
            lines.append(f"{name} = pltpu.make_async_copy({s_text}, {d_text}, sems.at[{sem}])")
            lines.append(f"{name}.start()")
        order = list(started)
        rng.shuffle(order)
        for name, *_ in order:
            lines.append(f"{name}.wait()")
        steps.append(Step(tuple(lines)))
        vm = [b for b in buffers if b.kind == "vmem"]
        if vm and rng.random() < 0.5:
            b = rng.choice(vm)
            op = rng.choice(["+", "*", "-"]) if b.dtype != "bool" else "^"
            steps.append(Step((f"{b.name}[...] = {b.name}[...] {op} {literal(rng, b.dtype)}",)))
    # The scratch buffers' final values reach an output too (else their
    # compute would be dead).
    for b in buffers:
        if b.kind == "vmem":
            out = next(
                (o for o in buffers if o.kind == "out" and o.dtype == b.dtype and len(o.shape) <= len(b.shape)), None
            )
            if out is not None and rng.random() < 0.7:
                src = b.name if b.shape == out.shape else f"{b.name}.at[{rng.randrange(b.shape[0])}]"
                copies += 1
                steps.append(
                    Step(
                        (
                            f"c{copies} = pltpu.make_async_copy({src}, {out.name}, sems.at[0])",
                            f"c{copies}.start()",
                            f"c{copies}.wait()",
                        )
                    )
                )
    seeds = tuple(rng.randrange(1 << 30) for b in buffers if b.kind == "in")
    return DmaKernel(
        tuple(buffers),
        n_sems,
        tuple(g.starts) or (0,),
        tuple(steps),
        rng.choice(["eager", "on_wait"]),
        seeds,
        ours_tpu=rng.random() < 0.4,
    )
