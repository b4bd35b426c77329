"""Category "multi_device": kernels under `jax.shard_map` over random meshes
(1-D of 2 to 8 devices, 2-D of 2x2 / 2x3 / 2x4) that move data with remote
DMAs in rounds: in each round every device sends one region (its own
block, or a slot it received in an earlier round) to its image under a
permutation of the devices (a shift along an axis, a reversal, an xor
pairing, a transpose of a square mesh) -- an all-gather is N-1 shift
rounds. Device ids as MESH tuples, MESH dicts naming one axis, or LOGICAL
ids; a full barrier (every device signals every other's barrier
semaphore), a barrier with the round's partners only, or none first;
waits as `.wait()` or `wait_send()` / `wait_recv()` in either order;
regular semaphores pinged around a ring. Meaning: the permutations applied
to the blocks in numpy.
"""

from __future__ import annotations

import dataclasses
import math

from fuzzing.values import dt

_MESHES = [(2,), (3,), (4,), (8,), (2, 2), (2, 3), (2, 4), (4,), (2,)]
_DTYPES = ("float32", "int32", "bfloat16", "int8", "uint32")


@dataclasses.dataclass(frozen=True)
class Round:
    perm: tuple  # perm[d]: the device device d sends to (linear ids)
    target_text: str  # source text of the device_id argument, computed from the mesh coordinates
    id_type: str  # "MESH" / "LOGICAL"
    src_slot: int  # -1: the device's own block, else a slot received before
    wait_style: str  # "wait" / "send_recv" / "recv_send"
    source_text: str  # the device_id of the device sending to this one (the inverse permutation)
    # (row0, rows, col0, cols) of the slot the round copies (None: all of it);
    # only where every output starts filled before any device writes.
    region: tuple | None = None


@dataclasses.dataclass(frozen=True)
class MultiDeviceKernel:
    mesh: tuple
    rows: int
    cols: int
    dtype: str
    rounds: tuple
    barrier: str  # "full" / "partners" / "none"
    ping: bool  # a regular-semaphore ring ping after the rounds
    mode: str
    seed: int
    ours_tpu: bool = False  # mosaic_rt runs in its "tpu" DMA mode
    category: str = "multi_device"

    def devices(self) -> int:
        return math.prod(self.mesh)

    def knobs(self) -> dict:
        return {"out_of_bounds_reads": "raise", "dma_execution_mode": self.mode}

    def our_knobs(self) -> dict:
        # mosaic_rt's "tpu" mode (copies to another core land at its next
        # synchronisation point) must give what stock's modes give.
        return {"dma_execution_mode": "tpu"} if self.ours_tpu else {}

    def render(self) -> str:
        n = self.devices()
        axes = ("x",) if len(self.mesh) == 1 else ("x", "y")
        slots = max(1, len(self.rounds))
        r, c = self.rows, self.cols
        lines = []
        if len(axes) == 1:
            lines.append('me = lax.axis_index("x")')
        else:
            lines.append('xi, yi = lax.axis_index("x"), lax.axis_index("y")')
            lines.append(f"me = xi * {self.mesh[1]} + yi")
        if self.filled():
            # The whole output starts filled (before the barrier: no write of
            # another device can come before it).
            lines.append(f"fill_ref[...] = jnp.full(({(slots + 1) * r}, {c}), 3, {dt(self.dtype)})")
            lines.append("pltpu.sync_copy(fill_ref, o_ref)")
        lines.append(f"pltpu.sync_copy(x_ref, o_ref.at[pl.ds(0, {r}), :])  # slot 0: the device's own block")
        if self.barrier == "full" and n > 1:
            lines.append("barrier = pltpu.get_barrier_semaphore()")
            lines.append(f"for hop in range(1, {n}):")
            lines.append(
                f"    pl.semaphore_signal(barrier, 1, device_id=lax.rem(me + hop, {n}),"
                " device_id_type=pl.DeviceIdType.LOGICAL)"
            )
            lines.append(f"pl.semaphore_wait(barrier, {n - 1})")
        for k, rd in enumerate(self.rounds):
            id_type = f"pl.DeviceIdType.{rd.id_type}"
            lines.append(f"# round {k}: send to {list(rd.perm)}")
            lines.append(f"target{k} = {rd.target_text}")
            if self.barrier == "partners":
                # Both partners of the round signal each other: the one we
                # write to is inside the kernel once its signal arrived.
                lines.append("barrier = pltpu.get_barrier_semaphore()")
                lines.append(f"pl.semaphore_signal(barrier, 1, device_id=target{k}, device_id_type={id_type})")
                lines.append(f"pl.semaphore_signal(barrier, 1, device_id={rd.source_text}, device_id_type={id_type})")
                lines.append("pl.semaphore_wait(barrier, 2)")
            src = "x_ref" if rd.src_slot < 0 else f"o_ref.at[pl.ds({(rd.src_slot + 1) * r}, {r}), :]"
            dst = f"o_ref.at[pl.ds({(k + 1) * r}, {r}), :]"
            if rd.region is not None:
                r0, nr, c0, nc = rd.region
                src += f".at[pl.ds({r0}, {nr}), pl.ds({c0}, {nc})]"
                dst += f".at[pl.ds({r0}, {nr}), pl.ds({c0}, {nc})]"
            lines.append(
                f"copy{k} = pltpu.make_async_remote_copy({src}, {dst}, send_sems.at[{k}], recv_sems.at[{k}],"
                f" device_id=target{k}, device_id_type={id_type})"
            )
            lines.append(f"copy{k}.start()")
            if rd.wait_style == "wait":
                lines.append(f"copy{k}.wait()")
            elif rd.wait_style == "send_recv":
                lines += [f"copy{k}.wait_send()", f"copy{k}.wait_recv()"]
            else:
                lines += [f"copy{k}.wait_recv()", f"copy{k}.wait_send()"]
        if self.ping and n > 1:
            lines.append(
                f"pl.semaphore_signal(ping, me + 1, device_id=lax.rem(me + 1, {n}),"
                " device_id_type=pl.DeviceIdType.LOGICAL)"
            )
            lines.append(f"pl.semaphore_wait(ping, lax.rem(me + {n - 1}, {n}) + 1)")
        body = "\n".join(f"    {line}" for line in lines)
        spec = 'P("x")' if len(axes) == 1 else 'P(("x", "y"))'
        tables = [list(rd.perm) for rd in self.rounds]
        regions = [rd.region for rd in self.rounds]
        srcs = [rd.src_slot for rd in self.rounds]
        collective = ", compiler_params=pltpu.CompilerParams(collective_id=0)" if self.barrier != "none" else ""
        return f"""
N = {n}
ARGS = (make_input({self.seed}, ({n * r}, {c}), {self.dtype!r}, special=False),)


def kernel(x_ref, o_ref, send_sems, recv_sems, ping, fill_ref):
{body}


def run(params):
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(({(slots + 1) * r}, {c}), {dt(self.dtype)}),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[
            pltpu.SemaphoreType.DMA(({slots},)),
            pltpu.SemaphoreType.DMA(({slots},)),
            pltpu.SemaphoreType.REGULAR,
            pltpu.VMEM(({(slots + 1) * r}, {c}), {dt(self.dtype)}),
        ]{collective},
        interpret=params,
    )
    mesh = Mesh(np.array(jax.devices()[:N]).reshape({self.mesh}), {axes})
    spec = {spec}
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=(spec,), out_specs=spec, check_vma=False))
    return [f(jax.device_put(ARGS[0], NamedSharding(mesh, spec)))]


def meaning():
    blocks = np.split(np.asarray(ARGS[0]), N)
    slots = [[b] + [np.full_like(b, 3) for _ in range({len(self.rounds)})] for b in blocks]
    for k, (perm, src, region) in enumerate(zip({tables}, {srcs}, {regions})):
        r0, nr, c0, nc = region or (0, {r}, 0, {c})
        box = (slice(r0, r0 + nr), slice(c0, c0 + nc))
        for d in range(N):
            slots[perm[d]][k + 1][box] = slots[d][0 if src < 0 else src + 1][box]
    return [np.concatenate([np.concatenate(s) for s in slots])]
"""

    def filled(self) -> bool:
        return any(rd.region is not None for rd in self.rounds)

    def shrinks(self):
        # Fewer rounds (a later round may forward an earlier one's slot: keep those whole).
        for k in reversed(range(len(self.rounds))):
            if not any(rd.src_slot == k for rd in self.rounds[k + 1 :]):
                rounds = tuple(
                    dataclasses.replace(rd, src_slot=rd.src_slot - (rd.src_slot > k))
                    for rd in self.rounds[:k] + self.rounds[k + 1 :]
                )
                yield dataclasses.replace(self, rounds=rounds)
        if self.ping:
            yield dataclasses.replace(self, ping=False)
        if self.barrier != "none" and not self.filled():
            yield dataclasses.replace(self, barrier="none")
        for k, rd in enumerate(self.rounds):
            if rd.region is not None:
                rounds = self.rounds[:k] + (dataclasses.replace(rd, region=None),) + self.rounds[k + 1 :]
                yield dataclasses.replace(self, rounds=rounds)
        if self.ours_tpu:
            yield dataclasses.replace(self, ours_tpu=False)
        if self.mode == "on_wait":
            yield dataclasses.replace(self, mode="eager")


def _permutation(rng, mesh):
    """(perm over linear ids, device_id source text, id type, the inverse's
    device_id source text)."""
    n = math.prod(mesh)
    if len(mesh) == 1:
        forms = ["shift", "reverse"] + (["xor"] if n & (n - 1) == 0 else [])
        f = rng.choice(forms)
        if f == "shift":
            k = rng.randint(1, max(1, n - 1)) if n > 1 else 0
            perm = [(d + k) % n for d in range(n)]
            text, inverse = f"lax.rem(me + {k}, {n})", f"lax.rem(me + {n - k}, {n})"
        elif f == "reverse":
            perm = [n - 1 - d for d in range(n)]
            text = inverse = f"{n - 1} - me"
        else:
            m = rng.randint(1, n - 1)
            perm = [d ^ m for d in range(n)]
            text = inverse = f"me ^ {m}"
        if rng.random() < 0.5:
            return perm, text, "LOGICAL", inverse
        return perm, f"({text},)", "MESH", f"({inverse},)"
    a, b = mesh
    f = rng.choice(["shift_x", "shift_y", "swap"] + (["transpose"] if a == b else []))
    if f == "shift_x":
        k = rng.randint(1, a - 1)
        coords = lambda x, y: ((x + k) % a, y)  # noqa: E731
        tx, ty = f"lax.rem(xi + {k}, {a})", "yi"
        ix, iy = f"lax.rem(xi + {a - k}, {a})", "yi"
    elif f == "shift_y":
        k = rng.randint(1, b - 1)
        coords = lambda x, y: (x, (y + k) % b)  # noqa: E731
        tx, ty = "xi", f"lax.rem(yi + {k}, {b})"
        ix, iy = "xi", f"lax.rem(yi + {b - k}, {b})"
    elif f == "swap":
        coords = lambda x, y: (a - 1 - x, b - 1 - y)  # noqa: E731
        tx, ty = ix, iy = f"{a - 1} - xi", f"{b - 1} - yi"
    else:
        coords = lambda x, y: (y, x)  # noqa: E731
        tx, ty = ix, iy = "yi", "xi"
    perm = [0] * (a * b)
    for x in range(a):
        for y in range(b):
            cx, cy = coords(x, y)
            perm[x * b + y] = cx * b + cy
    style = rng.choice(["tuple", "dict", "logical"])
    if style == "logical":
        return perm, f"({tx}) * {b} + ({ty})", "LOGICAL", f"({ix}) * {b} + ({iy})"
    if style == "dict" and f in ("shift_x", "shift_y"):
        axis, value, inv = ("x", tx, ix) if f == "shift_x" else ("y", ty, iy)
        return perm, f'{{"{axis}": {value}}}', "MESH", f'{{"{axis}": {inv}}}'
    return perm, f"({tx}, {ty})", "MESH", f"({ix}, {iy})"


def generate(rng) -> MultiDeviceKernel:
    mesh = rng.choice(_MESHES)
    rounds = []
    for k in range(rng.randint(1, 3 if math.prod(mesh) > 4 else 4)):
        perm, text, id_type, inverse = _permutation(rng, mesh)
        src = rng.choice([-1, -1] + list(range(k)))
        wait = rng.choice(["wait", "wait", "send_recv", "recv_send"])
        rounds.append(Round(tuple(perm), text, id_type, src, wait, inverse))
    # A barrier with the round's partners proves the target entered the
    # kernel only with one round: the barrier semaphore only counts, so a
    # later round's signal may satisfy an earlier round's wait.
    barrier = rng.choice(["full", "partners", "none", "full"] if len(rounds) == 1 else ["full", "none", "full"])
    if barrier != "none" and rng.random() < 0.5:
        # Copies of sub-regions (zero rows now and then): the output starts
        # filled before the barrier, so no remote write comes before it.
        cols = rng.choice([128, 256])
        rows = rng.choice([8, 16])
        rounds = [
            dataclasses.replace(rd, region=_region(rng, rows, cols)) if rng.random() < 0.7 else rd for rd in rounds
        ]
        return _kernel(rng, mesh, rounds, barrier, rows, cols)
    return _kernel(rng, mesh, rounds, barrier, rng.choice([8, 16]), rng.choice([128, 256]))


def _region(rng, rows: int, cols: int) -> tuple:
    nr = rng.choice([0, 1, 2, rows // 2, rows - 1])
    r0 = rng.randint(0, rows - max(nr, 1))
    nc = rng.choice([128, cols])
    c0 = rng.choice(range(0, cols - nc + 1, 128))
    return (r0, nr, c0, nc)


def _kernel(rng, mesh, rounds, barrier, rows, cols) -> MultiDeviceKernel:
    return MultiDeviceKernel(
        mesh,
        rows,
        cols,
        rng.choice(_DTYPES),
        tuple(rounds),
        barrier,
        barrier != "partners" and rng.random() < 0.3,  # (a ring ping needs every device inside)
        rng.choice(["eager", "on_wait"]),
        rng.randrange(1 << 30),
        ours_tpu=rng.random() < 0.4,
    )
