"""Stateful property test of the native runtime against a pure-Python model.

A hypothesis `RuleBasedStateMachine` drives `mosaic_rt.Runtime` on a small
topology (2 devices x 2 cores) in both DMA modes with random buffer and
semaphore allocations, loads and stores, signals, waits that can succeed,
and local and remote DMAs. The model replays the documented semantics:

* a signal adds to the target core's counter (no target device: the
  signalling device; no target core: core 0); a wait takes `value` once the
  count reaches it;
* eager DMAs copy at start and signal the bytes (remote: send on the source
  core, receive on the same core of the target device);
* on_wait DMAs queue a read step on (send semaphore, source core) and a
  read+write step on (receive semaphore, destination core); a waiter whose
  count is short runs the most recently queued step of its own (semaphore,
  core) until the count suffices; each step runs once, data is read when the
  read step runs.

After every step every semaphore count, every buffer's bytes and the leak
report (non-zero counts and DMAs never run) must match the model.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from mosaic_rt import Runtime

DEVICES, CORES = 2, 2
DTYPES = (np.dtype(np.float32), np.dtype(np.int32))
FILL = {np.dtype(np.float32): np.float32(np.nan), np.dtype(np.int32): np.int32(2**31 - 1)}


@dataclasses.dataclass
class Buf:
    space: str
    id: int
    device: int
    core: int  # owning core (0 for HBM, shared by the device's cores)
    data: np.ndarray

    def visible_from(self, device: int, core: int) -> bool:
        return self.device == device and (self.space == "hbm" or self.core == core)


@dataclasses.dataclass
class Dma:
    src: Buf
    src_start: int
    dst: Buf
    dst_start: int
    n: int
    src_key: tuple[int, int] | None  # (send semaphore, global core), remote only
    dst_key: tuple[int, int]
    state: str = "started"  # -> "read" -> "completed"
    held: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.n * self.src.data.dtype.itemsize

    def read(self) -> np.ndarray:
        return self.src.data[self.src_start : self.src_start + self.n].copy()

    def write(self, values: np.ndarray) -> None:
        self.dst.data[self.dst_start : self.dst_start + self.n] = values


@dataclasses.dataclass
class Step:
    kind: str  # "read" (send side) or "write" (receive side)
    dma: Dma

    def pending(self) -> bool:
        if self.kind == "read":
            return self.dma.state == "started"
        return self.dma.state != "completed"


def gcore(device: int, core: int) -> int:
    return device * CORES + core


def place(g: int) -> tuple[int, int]:
    return divmod(g, CORES)


class RuntimeMachine(RuleBasedStateMachine):
    @initialize(mode=st.sampled_from(["eager", "on_wait"]))
    def setup(self, mode):
        self.mode = mode
        self.rt = Runtime(DEVICES, CORES, dma_execution_mode=mode, wait_timeout=5)
        self.buffers: list[Buf] = []
        self.next_sem = {d: 2000 for d in range(DEVICES)}
        self.counts: dict[tuple[int, int], int] = defaultdict(int)
        self.queues: dict[tuple[int, int], list[Step]] = defaultdict(list)
        # A starting set so that DMAs and waits are possible from the first
        # step: per core a VMEM buffer, per device an HBM one, 4 semaphores.
        for device in range(DEVICES):
            for core in range(CORES):
                self._allocate(device, core, "vmem", np.arange(8, dtype=np.float32) + 10 * core)
            self._allocate(device, 0, "hbm", np.arange(8, dtype=np.float32) * -1)
        for device in range(DEVICES):
            self.allocate_semaphores(device, "dma", 2)

    def _allocate(self, device, core, space, values):
        bid = self.rt.allocate_buffer(device, core, space, values)
        self.buffers.append(Buf(space, bid, device, 0 if space == "hbm" else core, values.copy()))

    # ------------------------------------------------------------ model

    @property
    def sems(self) -> list[int]:
        return list(range(2000, max(self.next_sem.values())))

    def signal_model(self, key, inc):
        self.counts[key] += inc

    def run_step(self, step: Step) -> None:
        dma = step.dma
        if step.kind == "read":
            if dma.state == "started":
                dma.held = dma.read()
                dma.state = "read"
                self.signal_model(dma.src_key, dma.nbytes)
            return
        if dma.state == "started":
            dma.write(dma.read())
            if dma.src_key is not None:
                self.signal_model(dma.src_key, dma.nbytes)
        elif dma.state == "read":
            dma.write(dma.held)
            dma.held = None
        else:
            return
        dma.state = "completed"
        self.signal_model(dma.dst_key, dma.nbytes)

    def obtainable(self, key) -> int:
        """The count a wait on `key` can reach by running its queued steps."""
        total = self.counts[key]
        for step in self.queues[key]:
            dma = step.dma
            if step.kind == "read" and dma.state == "started":
                total += dma.nbytes
            elif step.kind == "write" and dma.state != "completed":
                total += dma.nbytes
        return total

    def wait_model(self, key, value) -> None:
        while self.counts[key] < value:
            self.run_step(self.queues[key].pop())
        self.counts[key] -= value

    def waitable(self) -> list[tuple[int, int]]:
        return [k for k in set(self.counts) | set(self.queues) if self.obtainable(k) > 0]

    # ------------------------------------------------------------ rules

    @rule(
        data=st.data(),
        device=st.integers(0, DEVICES - 1),
        core=st.integers(0, CORES - 1),
        space=st.sampled_from(["vmem", "hbm"]),
        dtype=st.sampled_from(DTYPES),
        length=st.integers(1, 8),
        init=st.booleans(),
    )
    def allocate_buffer(self, data, device, core, space, dtype, length, init):
        if init:
            values = np.array(
                data.draw(st.lists(st.integers(-100, 100), min_size=length, max_size=length)), dtype=dtype
            )
            bid = self.rt.allocate_buffer(device, core, space, values)
        else:
            values = np.full(length, FILL[dtype], dtype=dtype)
            bid = self.rt.allocate_buffer(device, core, space, shape=(length,), dtype=dtype)
        owner = 0 if space == "hbm" else core
        same = [b for b in self.buffers if b.space == space and b.id == bid and b.device == device and b.core == owner]
        if same:
            # Buffer ids count per core; an HBM buffer is one per device, so
            # another core's allocation of the same id shares the existing
            # buffer (and its content), as stock does.
            assert space == "hbm", "a per-core buffer id was reused"
            return
        self.buffers.append(Buf(space, bid, device, owner, values))

    @rule(device=st.integers(0, DEVICES - 1), kind=st.sampled_from(["regular", "dma"]), count=st.integers(1, 3))
    def allocate_semaphores(self, device, kind, count):
        first = self.rt.allocate_semaphores(device, None, kind, count)
        assert first == self.next_sem[device]
        self.next_sem[device] += count

    @precondition(lambda self: self.sems)
    @rule(
        data=st.data(),
        device=st.integers(0, DEVICES - 1),
        core=st.integers(0, CORES - 1),
        inc=st.integers(0, 40),
        target_device=st.none() | st.integers(0, DEVICES - 1),
        target_core=st.none() | st.integers(0, CORES - 1),
    )
    def signal(self, data, device, core, inc, target_device, target_core):
        sem = data.draw(st.sampled_from(self.sems))
        self.rt.signal(device, core, sem, inc, target_device=target_device, target_core=target_core)
        td = device if target_device is None else target_device
        tc = 0 if target_core is None else target_core
        self.signal_model((sem, gcore(td, tc)), inc)

    @precondition(lambda self: self.waitable())
    @rule(data=st.data(), dma_api=st.booleans())
    def wait(self, data, dma_api):
        key = data.draw(st.sampled_from(sorted(self.waitable())))
        value = data.draw(st.integers(1, self.obtainable(key)))
        device, core = place(key[1])
        if dma_api:
            self.rt.dma_wait(device, core, key[0], value)
        else:
            self.rt.wait(device, core, key[0], value)
        self.wait_model(key, value)

    def dma_waitable(self) -> list[tuple[int, int]]:
        return [k for k, q in self.queues.items() if self.obtainable(k) > self.counts[k]]

    @precondition(lambda self: self.dma_waitable())
    @rule(data=st.data())
    def wait_running_queued_dmas(self, data):
        """A wait that needs at least one queued DMA step to run (on_wait)."""
        key = data.draw(st.sampled_from(sorted(self.dma_waitable())))
        value = data.draw(st.integers(self.counts[key] + 1, self.obtainable(key)))
        self.rt.dma_wait(*place(key[1]), key[0], value)
        self.wait_model(key, value)

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def store(self, data):
        buf = data.draw(st.sampled_from(self.buffers))
        core = buf.core if buf.space == "vmem" else data.draw(st.integers(0, CORES - 1))
        length = len(buf.data)
        start = data.draw(st.integers(0, length - 1))
        n = data.draw(st.integers(1, length - start))
        values = np.array(data.draw(st.lists(st.integers(-100, 100), min_size=n, max_size=n)), dtype=buf.data.dtype)
        self.rt.store(buf.device, core, buf.space, buf.id, values, [(start, n)])
        buf.data[start : start + n] = values

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def load(self, data):
        buf = data.draw(st.sampled_from(self.buffers))
        core = buf.core if buf.space == "vmem" else data.draw(st.integers(0, CORES - 1))
        length = len(buf.data)
        start = data.draw(st.integers(0, length - 1))
        n = data.draw(st.integers(1, length - start))
        got = self.rt.load(buf.device, core, buf.space, buf.id, [(start, n)])
        np.testing.assert_array_equal(got, buf.data[start : start + n])

    def _dma_pair(self, data, remote):
        """(device, core, src, dst, dst device) for a DMA, or None."""
        pairs = []
        for src in self.buffers:
            for dst in self.buffers:
                if src.data.dtype != dst.data.dtype:
                    continue
                if remote != (dst.device != src.device):
                    continue
                for core in range(CORES):
                    if src.visible_from(src.device, core) and dst.visible_from(dst.device, core):
                        pairs.append((src.device, core, src, dst))
        if not pairs:
            return None
        return data.draw(st.sampled_from(pairs))

    @precondition(lambda self: self.buffers and self.sems)
    @rule(data=st.data(), remote=st.booleans())
    def dma_start(self, data, remote):
        pick = self._dma_pair(data, remote)
        if pick is None:
            return
        device, core, src, dst = pick
        n = data.draw(st.integers(1, min(len(src.data), len(dst.data))))
        s0 = data.draw(st.integers(0, len(src.data) - n))
        d0 = data.draw(st.integers(0, len(dst.data) - n))
        dst_sem = data.draw(st.sampled_from(self.sems))
        src_sem = data.draw(st.sampled_from(self.sems)) if remote else None
        self.rt.dma_start(
            device,
            core,
            (src.space, src.id, [(s0, n)]),
            (dst.space, dst.id, [(d0, n)]),
            dst_sem,
            src_sem=src_sem,
            dst_device=dst.device if remote else None,
        )
        dma = Dma(
            src, s0, dst, d0, n, (src_sem, gcore(device, core)) if remote else None, (dst_sem, gcore(dst.device, core))
        )
        if self.mode == "eager":
            self.run_step(Step("write", dma))
            return
        if remote:
            self.queues[dma.src_key].append(Step("read", dma))
        self.queues[dma.dst_key].append(Step("write", dma))

    @precondition(lambda self: self.buffers)
    @rule(data=st.data())
    def mismatched_dma_is_rejected(self, data):
        """A DMA whose two sides differ in shape fails at start in both modes
        and changes nothing."""
        src = data.draw(st.sampled_from(self.buffers))
        dsts = [
            b
            for b in self.buffers
            if b.device == src.device and len(b.data) != len(src.data) and b.visible_from(src.device, src.core)
        ]
        if not dsts or not self.sems:
            return
        dst = data.draw(st.sampled_from(dsts))
        with pytest.raises(ValueError, match="dtypes or shapes differ"):
            self.rt.dma_start(src.device, src.core, (src.space, src.id), (dst.space, dst.id), self.sems[0])

    # ------------------------------------------------------- invariants

    @invariant()
    def counts_match(self):
        if not hasattr(self, "rt"):
            return
        for sem in self.sems:
            for g in range(DEVICES * CORES):
                assert self.rt.read(*place(g), sem) == self.counts[(sem, g)], (sem, place(g))

    @invariant()
    def memory_matches(self):
        if not hasattr(self, "rt"):
            return
        for buf in self.buffers:
            got = self.rt.buffer_content(buf.device, buf.core, buf.space, buf.id)
            assert got.tobytes() == buf.data.tobytes() or np.array_equal(
                got, buf.data, equal_nan=buf.data.dtype.kind == "f"
            ), (buf, got)

    @invariant()
    def leaks_match(self):
        if not hasattr(self, "rt"):
            return
        want = set()
        for key in set(self.counts) | set(self.queues):
            pending = sum(step.pending() for step in self.queues[key])
            if self.counts[key] or pending:
                want.add((key[0], *place(key[1]), self.counts[key], pending))
        got = {(lk.sem, lk.device, lk.core, lk.count, len(lk.pending_dmas)) for lk in self.rt.leaks()}
        assert got == want
        for device in range(DEVICES):
            assert {lk.device for lk in self.rt.leaks(device)} <= {device}


RuntimeMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRuntimeMatchesTheModel = RuntimeMachine.TestCase
