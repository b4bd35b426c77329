//! The `Runtime`: one simulated running kernel. This file is the public
//! contract used by the FFI layer and the pyo3 binding; the work is done in
//! `memory` (buffers), `sem` (semaphores, waits, barrier, failure) and `dma`,
//! none of which knows of the runtime: it owns them and wires them together
//! (the DMA engine gets a [`DmaEnv`], the semaphore table callbacks), and
//! adds the race-detector and timeline hooks around each operation.
//!
//! Errors are returned, never recorded implicitly: the caller decides whether
//! an error ends the kernel (the FFI layer calls [`Runtime::fail`] on every
//! error; the Python binding leaves that to the user).

use crate::config::{Config, Topology};
use crate::dma::{DmaEnv, DmaRequest, DmaStep, DmaView};
use crate::error::{Result, RtError};
use crate::grid::GridLoop;
use crate::memory::{Access, BufferInfo, BufferKey, BufferSpec, MemRef, MemorySpace, MemoryTable, Stored};
use crate::prng::CorePrng;
use crate::races::{RaceDetector, RaceLog};
use crate::region::Region;
use crate::revisit::RevisitTracker;
use crate::sem::{Leak, SemKind, SemTable, SemWait};
use crate::sync::{lock, Mutex};
use crate::trace::Tracer;
use mosaic_rt_wire::DType;
#[cfg(not(loom))]
use std::sync::Arc;

mod remote_ops;

pub struct Runtime {
    config: Config,
    topo: Topology,
    memory: MemoryTable,
    /// The semaphores, with on_wait DMAs' steps queued on them.
    sems: SemTable<DmaStep>,
    /// Per global core: output-revisit history and PRNG state. Only the
    /// core's own thread touches them, so the locks are uncontended.
    cores: Vec<CoreLocals>,
    /// Only with `detect_races`: every hook is one branch on this when off.
    races: Option<RaceDetector>,
    /// Only with `trace`: every hook is one branch on this when off (boxed:
    /// the hot fields stay together).
    trace: Option<Box<Tracer>>,
    /// Only when other processes own devices of the launch (`remote`).
    remote: Option<Box<crate::remote::Link>>,
    /// Per device: owned by another process this one cannot reach (a
    /// launch spanning processes without a transport; `None` otherwise).
    unreachable: Option<Box<[bool]>>,
    /// Counts this runtime in [`live_runtimes`] while it exists.
    _live: LiveGuard,
}

/// Runtimes alive in the process (launches not yet freed, `mosaic_rt.Runtime`
/// objects): a finished launch that stays counted holds its whole memory.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many runtimes exist now (tests, diagnostics: each one owns its
/// launch's simulated memory).
pub fn live_runtimes() -> usize {
    LIVE.load(std::sync::atomic::Ordering::SeqCst)
}

struct LiveGuard;

impl LiveGuard {
    fn new() -> LiveGuard {
        LIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        LiveGuard
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What only a core's own thread touches (see `Runtime::cores`).
#[derive(Default)]
struct CoreLocals {
    revisit: Mutex<RevisitTracker>,
    prng: Mutex<CorePrng>,
    /// The native grid loop (`grid_begin` .. its last `grid_copy_out`).
    grid: Mutex<Option<GridLoop>>,
}

impl Runtime {
    /// A runtime driven directly: every device is present from the start.
    pub fn new(config: Config) -> Result<Runtime> {
        Self::build(config, true)
    }

    /// The runtime of a kernel launch: devices join one by one
    /// ([`Runtime::join_device`]) and leave ([`Runtime::leave_device`]).
    pub fn new_launch(config: Config) -> Result<Runtime> {
        Self::build(config, false)
    }

    /// The runtime of a launch spanning processes: `link` reaches the
    /// devices other processes own.
    pub fn new_linked(config: Config, link: crate::remote::Link) -> Result<Runtime> {
        let mut rt = Self::build(config, false)?;
        rt.sems.set_remote(&link.local_mask(), false);
        if let Some(t) = &rt.trace {
            t.elsewhere(&link.local_mask());
        }
        if let Some(d) = link.driver() {
            rt.sems.set_driver(d);
        }
        rt.remote = Some(Box::new(link));
        Ok(rt)
    }

    /// The runtime of a launch spanning processes in a process not attached
    /// to the others (no MPI): only the devices of `local` (true) run
    /// here; a signal or DMA to any other fails, naming the install line.
    pub fn new_isolated(config: Config, local: &[bool]) -> Result<Runtime> {
        let mut rt = Self::build(config, false)?;
        rt.sems.set_remote(local, true);
        if let Some(t) = &rt.trace {
            t.elsewhere(local);
        }
        rt.unreachable = Some(local.iter().map(|&l| !l).collect());
        Ok(rt)
    }

    /// Errs if `device` belongs to a process this one cannot reach.
    #[inline]
    fn check_reachable(&self, device: Option<u32>) -> Result<()> {
        match (&self.unreachable, device) {
            (Some(u), Some(d)) if u.get(d as usize).copied().unwrap_or(false) => Err(crate::remote::unreachable(d)),
            _ => Ok(()),
        }
    }

    /// The connection to the other processes of the launch, if any.
    pub fn link(&self) -> Option<&crate::remote::Link> {
        self.remote.as_deref()
    }

    fn build(config: Config, joined: bool) -> Result<Runtime> {
        config.validate()?;
        let topo = config.topology();
        Ok(Runtime {
            remote: None,
            unreachable: None,
            memory: MemoryTable::new(&config),
            sems: SemTable::with_devices_joined(&config, joined),
            cores: (0..topo.num_cores()).map(|_| CoreLocals::default()).collect(),
            races: config.detect_races.then(|| {
                RaceDetector::with_policy(topo.num_devices, topo.cores_per_device, config.on_race)
                    .reporting_as_warnings(config.report_as_warnings)
            }),
            trace: config.trace.then(|| Box::new(Tracer::new(topo.num_devices, topo.cores_per_device))),
            topo,
            config,
            _live: LiveGuard::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What the DMA engine works with.
    #[inline]
    fn dma_env(&self) -> DmaEnv<'_> {
        DmaEnv {
            topo: self.topo,
            mode: self.config.dma_mode,
            memory: &self.memory,
            sems: &self.sems,
            races: self.races.as_ref(),
            trace: self.trace.as_deref(),
            remote: self.remote.as_deref(),
        }
    }

    // ---------------------------------------------------- launch membership

    /// Lets the process-wide deadlock detector look at this runtime (for
    /// devices that never join and cores that stop without telling us).
    #[cfg(not(loom))]
    pub fn watch(self: &Arc<Self>) {
        if self.config.detect_deadlocks && (self.config.deadlock_idle.is_some() || self.remote.is_some()) {
            let weak: std::sync::Weak<dyn crate::deadlock::detector::Watched> =
                Arc::downgrade(self) as std::sync::Weak<Runtime>;
            crate::deadlock::detector::watch(weak);
        }
    }

    /// `device`'s program joined the launch.
    pub fn join_device(&self, device: u32) -> Result<()> {
        self.sems.join(device)
    }

    /// `device`'s program left the launch (all its cores are done); may
    /// complete a deadlock, which then fails the launch. DMAs still on their
    /// way to it land first (kernel_end lands them earlier, before its leak
    /// report; a runtime driven directly gets it here).
    pub fn leave_device(&self, device: u32) -> Result<()> {
        let landed = if self.failure().is_none() { self.end_device_dmas(device) } else { Ok(()) };
        self.release_borrowed(device);
        self.sems.finish_device(device)?;
        landed
    }

    /// Ends the borrows of `device`'s input buffers (its XLA operands may be
    /// freed once its program stops): copied while a queued DMA of the
    /// device has yet to read its source (a peer's wait may run it),
    /// otherwise dropped. Run when the device leaves, is abandoned, or a
    /// host callback of it fails.
    pub fn release_borrowed(&self, device: u32) {
        self.memory.release_borrowed(device, self.config.num_devices > 1);
    }

    /// The program of core (device, core) ended (several cores per device):
    /// copies to it still on their way land now (see [`Self::end_core_dmas`]).
    pub fn finish_core(&self, device: u32, core: u32) -> Result<()> {
        let landed = self.end_core_dmas(device, core);
        self.sems.finish_core(device, core)?;
        landed
    }

    /// Core (device, core) is at a synchronisation point: DMAs from other
    /// cores waiting to land on it (dma_execution_mode "tpu") land now, on
    /// this thread, oldest first. Waits do this themselves; the FFI layer
    /// calls it at the end of each grid step, before the output blocks are
    /// copied out (on a TPU the pipeline waits for those copies' DMAs; the
    /// copies into the next step's blocks are not a point of their own,
    /// else a copy could land before the first step's body runs).
    #[inline]
    pub fn land_incoming(&self, device: u32, core: u32) -> Result<()> {
        self.sems
            .run_inbox(device, core, &mut |step: DmaStep| step.run(&self.dma_env()))
            .map_err(|e| e.at(device, core))
    }

    /// The program of core (device, core) has ended: DMAs to it still on
    /// their way land now, and later ones land when they start (nothing of
    /// the core can observe their order any more). Run before the core's
    /// leak report, so a copy it never waited for is counted there.
    pub fn end_core_dmas(&self, device: u32, core: u32) -> Result<()> {
        self.sems
            .close_inbox(device, core, &mut |step: DmaStep| step.run(&self.dma_env()))
            .map_err(|e| e.at(device, core))
    }

    /// [`Self::end_core_dmas`] for every core of `device` (its kernel_end).
    pub fn end_device_dmas(&self, device: u32) -> Result<()> {
        self.topo.check_device(device)?;
        (0..self.topo.cores_per_device).try_for_each(|core| self.end_core_dmas(device, core))
    }

    /// Descriptions of the DMAs waiting to land on (device, core)
    /// (tests, diagnostics).
    pub fn incoming_dmas(&self, device: u32, core: u32) -> Result<Vec<String>> {
        self.sems.inbox_pending(device, core)
    }

    /// Core (device, core) enters (`inside`) or leaves a user host
    /// callback: deadlock detection never fires while a core is inside one.
    pub fn callback_state(&self, device: u32, core: u32, inside: bool) -> Result<()> {
        self.sems.callback_state(device, core, inside)
    }

    /// One look of the deadlock detector thread (exposed for tests: the
    /// process counts as idle since `process_idle_since`).
    pub fn sems_tick(&self, process_idle_since: Option<std::time::Instant>, now: std::time::Instant) {
        self.sems.deadlock_tick(process_idle_since, now);
    }

    /// What deadlock detection sees core (device, core) doing.
    pub fn core_state(&self, device: u32, core: u32) -> Result<crate::deadlock::CoreState> {
        self.sems.core_state(device, core)
    }

    pub fn topology(&self) -> Topology {
        self.topo
    }

    // ---------------------------------------------------------------- memory

    /// Allocates a buffer on (device, core) -- on every core of the device
    /// when `core` is `None` -- and returns its id (ids count from 100 per
    /// (device, core) and stay in sync across cores). HBM/ANY buffers exist
    /// once per device (key core 0) and are reference-counted across cores.
    /// `shape` is the allocated (possibly padded) shape, `logical_shape` the
    /// user-visible one (defaults to `shape`).
    pub fn allocate_buffer(&self, device: u32, core: Option<u32>, spec: BufferSpec<'_>) -> Result<u32> {
        self.check_failed_at(device, core.unwrap_or(0))?;
        let id = self.memory.allocate(device, core, spec).map_err(|e| e.at(device, core.unwrap_or(0)))?;
        self.retry_held();
        Ok(id)
    }

    /// Drops one reference of the buffer; it is freed at zero.
    /// An HBM input buffer of `device` over `bytes` (C order, `shape`),
    /// borrowed read-only instead of copied; any write to it fails with an
    /// internal error.
    ///
    /// # Safety
    /// `bytes` must stay valid and unmodified after this call returns until
    /// [`Runtime::release_borrowed`] for `device` has returned (which
    /// [`Runtime::leave_device`] runs) or the runtime is dropped.
    pub unsafe fn allocate_borrowed_buffer(
        &self,
        device: u32,
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<u32> {
        self.check_failed_at(device, 0)?;
        // SAFETY: this fn's contract, passed on.
        unsafe { self.memory.allocate_borrowed(device, dtype, shape, bytes) }.map_err(|e| e.at(device, 0))
    }

    /// An HBM output buffer of `device` written in place in XLA's result
    /// memory (`len` bytes at `ptr`) instead of copied out at kernel end;
    /// it holds the fill values until written, or with `holds_value` the
    /// bytes already there (XLA put the aliased input's value in them).
    ///
    /// # Safety
    /// `ptr` must point to `len` writable bytes that nothing else reads or
    /// writes after this call returns until [`Runtime::finish_direct_outputs`]
    /// or [`Runtime::release_borrowed`] for `device` has returned (which
    /// [`Runtime::leave_device`] runs) or the runtime is dropped.
    pub unsafe fn allocate_direct_output(
        &self,
        device: u32,
        dtype: DType,
        shape: &[usize],
        ptr: *mut u8,
        len: usize,
        holds_value: bool,
    ) -> Result<u32> {
        self.check_failed_at(device, 0)?;
        // SAFETY: this fn's contract, passed on.
        unsafe { self.memory.allocate_direct(device, dtype, shape, ptr, len, holds_value) }.map_err(|e| e.at(device, 0))
    }

    /// Kernel end of `device`'s direct outputs: checks that `results` (the
    /// (address, length) of the XLA result buffers kernel_end received, in
    /// allocation order) are the memory they were written in, writes their
    /// pending fill values and ends their borrows. A mismatch is an
    /// internal error.
    pub fn finish_direct_outputs(&self, device: u32, results: &[(usize, usize)]) -> Result<()> {
        self.memory.finish_direct_outputs(device, results).map_err(|e| e.at(device, 0))
    }

    /// The memory `device`'s input buffers borrow now, as (address, length).
    pub fn borrowed_ranges(&self, device: u32) -> Vec<(usize, usize)> {
        self.memory.borrowed_ranges(device)
    }

    /// Whether buffer `key` borrows XLA's memory (tests, diagnostics).
    pub fn is_borrowed(&self, key: BufferKey) -> Result<bool> {
        self.memory.is_borrowed(key)
    }

    /// A free is a synchronisation point of (device, core): DMAs on their
    /// way to it land first, so none is left to write a freed buffer.
    pub fn free_buffer(&self, device: u32, core: u32, space: MemorySpace, id: u32) -> Result<()> {
        self.land_incoming(device, core)?;
        self.memory.free(device, core, space, id).map_err(|e| e.at(device, core))?;
        if let Some(races) = &self.races {
            // Ids are never reused, so a freed buffer's shadow state is dead
            // (run_scoped scratch in a loop would otherwise pile up).
            let key = BufferKey::for_access(space, id, device, core);
            if self.memory.info(key).is_err() {
                races.forget(key);
            }
        }
        Ok(())
    }

    pub fn buffer_info(&self, key: BufferKey) -> Result<BufferInfo> {
        self.memory.info(key)
    }

    /// The whole content (allocated shape) of a buffer, for inspection.
    pub fn buffer_bytes(&self, key: BufferKey) -> Result<Vec<u8>> {
        self.memory.content(key)
    }

    /// Shape of the value a load of `region` returns (squeezed dims dropped).
    pub fn region_shape(&self, key: BufferKey, region: &Region) -> Result<Vec<usize>> {
        self.memory.region_shape(key, region)
    }

    /// Checks access `access` of `r` as the access would (same errors) and
    /// returns the bytes of its value, without moving data.
    pub fn check_access(&self, r: MemRef<'_>, access: Access) -> Result<usize> {
        self.memory.check_access(r, access).map_err(|e| e.at(r.device, r.core))
    }

    /// Reads `r` (buffer (space, id) as seen from (device, core)) into `out`
    /// (C order, exactly the region's size).
    /// A kernel's load: under out-of-bounds reads "tpu", VMEM and SMEM are
    /// not bounds checked (see `MemoryTable::kernel_load`).
    pub fn load(&self, r: MemRef<'_>, out: &mut [u8]) -> Result<()> {
        self.memory.kernel_load(r, out).map_err(|e| e.at(r.device, r.core))?;
        self.note_access(r.device, r.core, r, false)
    }

    /// A masked load of `r` into `out`: the elements where `mask` (one byte
    /// per element, non-zero = true) is set; masked-off ones get the fill
    /// value and are never read (they may lie out of bounds). See
    /// [`MemoryTable::load_masked`]. Race detection sees a read of `r`.
    pub fn load_masked(&self, r: MemRef<'_>, mask: &[u8], out: &mut [u8]) -> Result<()> {
        self.memory.load_masked(r, mask, out).map_err(|e| e.at(r.device, r.core))?;
        self.note_access(r.device, r.core, r, false)
    }

    /// Writes `data` (C order, exactly the region's size) into `r`.
    pub fn store(&self, r: MemRef<'_>, data: &[u8]) -> Result<()> {
        self.memory.store(r, data).map_err(|e| e.at(r.device, r.core))?;
        self.note_access(r.device, r.core, r, true)
    }

    /// Writes `data` into `r` where `mask` (one byte per element, non-zero =
    /// true) is set, or everywhere without a mask, and returns the previous
    /// values in `out` (masked-off elements of `out` get `data`'s values, as
    /// stock).
    pub fn swap(&self, r: MemRef<'_>, data: &[u8], mask: Option<&[u8]>, out: &mut [u8]) -> Result<()> {
        self.memory.swap(r, data, mask, out).map_err(|e| e.at(r.device, r.core))?;
        // As stock: a swap is checked as a write (it conflicts with any
        // unordered access).
        self.note_access(r.device, r.core, r, true)
    }

    /// [`Self::swap`] of a value that may be a splat (one element filling
    /// `r`); without `out` the previous values are not copied out.
    pub fn swap_value(
        &self,
        r: MemRef<'_>,
        value: Stored<'_>,
        mask: Option<&[u8]>,
        out: Option<&mut [u8]>,
    ) -> Result<()> {
        self.memory.swap_value(r, value, mask, out).map_err(|e| e.at(r.device, r.core))?;
        self.note_access(r.device, r.core, r, true)
    }

    /// Copies `src` into `dst` with load-then-store semantics in one go (no
    /// intermediate buffer when the read is in bounds); returns the bytes
    /// moved. Errors are attributed to the source's (device, core).
    pub fn copy(&self, src: MemRef<'_>, dst: MemRef<'_>) -> Result<usize> {
        let n = self.memory.copy(src, dst).map_err(|e| e.at(src.device, src.core))?;
        // Both sides are accesses of the copying core (the source's).
        self.note_access(src.device, src.core, src, false)?;
        self.note_access(src.device, src.core, dst, true)?;
        Ok(n)
    }

    /// Race-detector hook for a successful access of `r` by (device, core).
    #[inline]
    fn note_access(&self, device: u32, core: u32, r: MemRef<'_>, write: bool) -> Result<()> {
        if let Some(races) = &self.races {
            if let Some(e) = races.core_access(&self.memory, device, core, r.key(), r.region, write) {
                return Err(e);
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ semaphores

    /// Allocates `count` consecutive internal semaphores on (device, core) --
    /// every core of the device when `core` is `None` -- and returns the first
    /// id (ids count from 2000 per core and stay in sync across cores).
    pub fn allocate_semaphores(&self, device: u32, core: Option<u32>, kind: SemKind, count: u32) -> Result<u32> {
        let first = self.sems.allocate(device, core, kind, count).map_err(|e| e.at(device, core.unwrap_or(0)))?;
        self.retry_held();
        Ok(first)
    }

    /// The barrier semaphore of `collective_id` (fixed-id namespace); it is
    /// created on first use and its id is the collective id.
    pub fn barrier_semaphore(&self, device: u32, collective_id: u32) -> Result<u32> {
        self.topo.check(device, 0)?;
        let id = self.sems.barrier_semaphore(collective_id).map_err(|e| e.at(device, 0))?;
        self.retry_held();
        Ok(id)
    }

    /// Adds `inc` to `sem` on (target_device, target_core). `None` target
    /// device means the signalling device; `None` target core means core 0,
    /// exactly as stock interpret mode does.
    pub fn semaphore_signal(
        &self,
        device: u32,
        core: u32,
        sem: u32,
        inc: i64,
        target_device: Option<u32>,
        target_core: Option<u32>,
    ) -> Result<()> {
        if self.races.is_some() || self.trace.is_some() {
            self.note_signal(device, core, sem, inc, target_device, target_core);
        }
        self.check_reachable(target_device).map_err(|e| e.at(device, core))?;
        if let Some(link) = self.remote.as_deref() {
            if target_device.is_some_and(|d| link.is_remote(d)) {
                return self.signal_remote(link, device, core, sem, inc, target_device, target_core);
            }
        }
        self.sems.signal(device, core, sem, inc, target_device, target_core).map_err(|e| e.at(device, core))
    }

    /// Race-detector and timeline hooks of a signal, before the count
    /// changes (a waiter that sees the count sees the clock); invalid ids
    /// record nothing (the signal itself reports them).
    #[cold]
    #[inline(never)]
    fn note_signal(
        &self,
        device: u32,
        core: u32,
        sem: u32,
        inc: i64,
        target_device: Option<u32>,
        target_core: Option<u32>,
    ) {
        // Stock: no device id -> this device; no core index -> core 0.
        let target = self.topo.check(target_device.unwrap_or(device), target_core.unwrap_or(0));
        if let (Ok(_), Ok(target)) = (self.topo.check(device, core), target) {
            if let Some(races) = &self.races {
                races.core_signal(device, core, sem, target);
            }
            if let Some(t) = &self.trace {
                crate::trace::core_signal(t, device, core, sem, inc, target);
            }
        }
    }

    /// Blocks until `sem` on (device, core) reaches `value`, then subtracts it.
    #[inline]
    pub fn semaphore_wait(&self, device: u32, core: u32, sem: u32, value: i64) -> Result<()> {
        self.semaphore_wait_at(device, core, sem, value, 0)
    }

    /// `semaphore_wait` from source site `site` (named by deadlock and
    /// misuse reports; 0: the thread's current site).
    #[inline]
    pub fn semaphore_wait_at(&self, device: u32, core: u32, sem: u32, value: i64, site: u32) -> Result<()> {
        self.wait(device, core, WaitKind::Sem, sem, value, site)
    }

    /// A non-decrementing wait (`pl.semaphore_wait(sem, value,
    /// decrement=False)`): blocks until `sem` on (device, core) reaches
    /// `value` and leaves the count as it is. Otherwise a wait like
    /// [`Self::semaphore_wait_at`]: it parks until a signal, runs DMAs
    /// queued on the semaphore, counts for deadlock detection and the wait
    /// timeout, and orders the core after the signals it saw (races).
    #[inline]
    pub fn semaphore_wait_no_decrement_at(
        &self,
        device: u32,
        core: u32,
        sem: u32,
        value: i64,
        site: u32,
    ) -> Result<()> {
        self.wait(device, core, WaitKind::SemNoDecrement, sem, value, site)
    }

    /// A semaphore wait of kind `kind` (its timeline name and whether it
    /// takes the count).
    #[inline(always)]
    fn wait(&self, device: u32, core: u32, kind: WaitKind, sem: u32, value: i64, site: u32) -> Result<()> {
        if self.trace.is_some() {
            return self.wait_traced(device, core, kind, sem, value, site);
        }
        self.wait_untraced(device, core, kind, sem, value, site)
    }

    /// A wait recorded on the timeline (off the hot path).
    #[cold]
    #[inline(never)]
    fn wait_traced(&self, device: u32, core: u32, kind: WaitKind, sem: u32, value: i64, site: u32) -> Result<()> {
        let Some(t) = &self.trace else { return self.wait_untraced(device, core, kind, sem, value, site) };
        let on = crate::trace::WaitOn { device, core, what: kind.name(), sem, value };
        crate::trace::traced_wait(t, on, || self.wait_untraced(device, core, kind, sem, value, site))
    }

    #[inline(always)]
    fn wait_untraced(&self, device: u32, core: u32, kind: WaitKind, sem: u32, value: i64, site: u32) -> Result<()> {
        let decrement = !matches!(kind, WaitKind::SemNoDecrement);
        let wait = SemWait { device, core, sem, value, decrement, site };
        self.sems.wait_with(wait, &mut |step: DmaStep| step.run(&self.dma_env())).map_err(|e| e.at(device, core))?;
        if let Some(races) = &self.races {
            races.wait_done(self.topo.global_core(device, core), sem);
        }
        Ok(())
    }

    /// A read is a synchronisation point (a kernel may poll a count):
    /// DMAs on their way to (device, core) land first.
    pub fn semaphore_read(&self, device: u32, core: u32, sem: u32) -> Result<i64> {
        self.land_incoming(device, core)?;
        self.sems.read(device, core, sem).map_err(|e| e.at(device, core))
    }

    /// Takes the whole count of `sem` on (device, core) after running the
    /// DMAs queued on it (see `Sems::take_all`): the count a kernel hands
    /// on with a semaphore it returns. Orders the core after the signals
    /// it took, as a wait does.
    pub fn semaphore_take(&self, device: u32, core: u32, sem: u32) -> Result<i64> {
        // A synchronisation point: copies on their way to the core land first.
        self.land_incoming(device, core)?;
        let count = self
            .sems
            .take_all(device, core, sem, &mut |step: DmaStep| step.run(&self.dma_env()))
            .map_err(|e| e.at(device, core))?;
        if let Some(races) = &self.races {
            races.wait_done(self.topo.global_core(device, core), sem);
        }
        Ok(count)
    }

    /// Starts a DMA (see [`DmaRequest`]); in `eager` mode it completes here.
    pub fn dma_start(&self, req: DmaRequest) -> Result<()> {
        let (device, core) = (req.device, req.core);
        self.check_reachable(req.dst_device).map_err(|e| e.at(device, core))?;
        crate::dma::start(&self.dma_env(), req, None).map_err(|e| e.at(device, core))
    }

    /// [`Self::dma_start`] through ref views: each side of `req` is read or
    /// written through its byte map in `view` (see [`DmaView`]).
    pub fn dma_start_view(&self, req: DmaRequest, view: DmaView) -> Result<()> {
        let (device, core) = (req.device, req.core);
        self.check_reachable(req.dst_device).map_err(|e| e.at(device, core))?;
        crate::dma::start(&self.dma_env(), req, Some(view)).map_err(|e| e.at(device, core))
    }

    /// Waits for `bytes` on DMA semaphore `sem` of (device, core), running
    /// queued DMAs that signal it (on_wait mode): a semaphore wait, named
    /// "dma_wait" on the timeline.
    pub fn dma_wait(&self, device: u32, core: u32, sem: u32, bytes: i64) -> Result<()> {
        self.dma_wait_at(device, core, sem, bytes, 0)
    }

    /// `dma_wait` from source site `site`.
    pub fn dma_wait_at(&self, device: u32, core: u32, sem: u32, bytes: i64, site: u32) -> Result<()> {
        self.wait(device, core, WaitKind::Dma, sem, bytes, site)
    }

    /// Rendezvous of all devices (one call per device), like stock's barrier.
    pub fn device_barrier(&self, device: u32) -> Result<()> {
        // The last device to arrive makes every core see every other's past.
        let sync_clocks = || {
            if let Some(races) = &self.races {
                races.sync_all();
            }
        };
        let on_local = |generation, count| self.barrier_arrived_here(generation, count);
        let barrier = || self.sems.device_barrier_with(device, &sync_clocks, &on_local).map_err(|e| e.at(device, 0));
        match &self.trace {
            Some(t) => crate::trace::traced_barrier(t, device, barrier),
            None => barrier(),
        }
    }

    /// The timeline recorder (`None` without `trace`).
    pub fn tracer(&self) -> Option<&Tracer> {
        self.trace.as_deref()
    }

    /// Makes the cores of `device` see each other's past (stock does this
    /// before and after running a multi-core grid); a no-op without race
    /// detection.
    pub fn sync_device_cores(&self, device: u32) -> Result<()> {
        self.topo.check(device, 0)?;
        if let Some(races) = &self.races {
            races.sync_device(device);
        }
        Ok(())
    }

    /// The race log of this runtime (`None` without `detect_races`).
    pub fn races(&self) -> Option<&RaceLog> {
        self.races.as_ref().map(|r| r.log())
    }

    /// Buffers the race detector keeps per-element state for; `None`
    /// without race detection. For tests and diagnostics.
    pub fn race_shadowed_buffers(&self) -> Option<usize> {
        self.races.as_ref().map(|r| r.num_shadows())
    }

    /// Vector-clock components in use (cores + DMAs in flight or not yet
    /// reusable); `None` without race detection. For tests and diagnostics.
    pub fn race_clock_components(&self) -> Option<usize> {
        self.races.as_ref().map(|r| r.num_threads())
    }

    /// Semaphores with a non-zero count, or with DMAs started and never
    /// waited for (on_wait mode), on `device` (all devices if `None`).
    pub fn leaks(&self, device: Option<u32>) -> Result<Vec<Leak>> {
        self.sems.leaks(device)
    }

    /// Semaphore counter pages (512 counters each) materialised so far; for
    /// memory diagnostics and tests.
    pub fn semaphore_pages_in_use(&self) -> usize {
        self.sems.counter_pages_in_use()
    }

    // ------------------------------------------------------ grid and PRNG

    /// Records the output blocks iteration `loop_idx` of (device, core)
    /// wrote; fails (stock's "Revisited block ..." error) if a block is
    /// written again after the core had moved on to other blocks.
    pub fn check_revisit(&self, device: u32, core: u32, loop_idx: &[i64], blocks: &[Option<Region>]) -> Result<()> {
        let g = self.topo.check(device, core)?;
        lock(&self.cores[g as usize].revisit).visit(loop_idx, blocks).map_err(|e| e.at(device, core))
    }

    /// Starts the native grid loop of (device, core) (see [`crate::grid`]).
    pub fn grid_begin(&self, device: u32, core: u32, grid: GridLoop) -> Result<()> {
        let g = self.topo.check(device, core)?;
        *lock(&self.cores[g as usize].grid) = Some(grid);
        Ok(())
    }

    /// Runs `f` on the grid loop of (device, core) (only that core's thread
    /// uses it, so the lock is uncontended; `f` may use the runtime).
    pub fn with_grid<R>(&self, device: u32, core: u32, f: impl FnOnce(&mut GridLoop) -> Result<R>) -> Result<R> {
        let g = self.topo.check(device, core)?;
        let mut guard = lock(&self.cores[g as usize].grid);
        match guard.as_mut() {
            Some(grid) => f(grid),
            None => Err(RtError::value(format!("grid step on device {device}, core {core} without grid_begin"))),
        }
    }

    /// Reseeds the PRNG of (device, core) (`pltpu.prng_seed`).
    pub fn prng_seed(&self, device: u32, core: u32, seeds: &[i64]) -> Result<()> {
        let g = self.topo.check(device, core)?;
        *lock(&self.cores[g as usize].prng) = CorePrng::seeded(seeds);
        Ok(())
    }

    /// Random 32-bit words from the PRNG of (device, core).
    pub fn prng_bits(&self, device: u32, core: u32, out: &mut [u32]) -> Result<()> {
        let g = self.topo.check(device, core)?;
        lock(&self.cores[g as usize].prng).fill_u32(out);
        Ok(())
    }

    // --------------------------------------------------------------- failure

    /// Records `err` as the kernel's failure unless one is recorded already,
    /// wakes every parked waiter, and returns the recorded root cause.
    pub fn fail(&self, err: RtError) -> RtError {
        let root = self.sems.fail(err.clone());
        if root == err {
            self.tell_failure(&root);
        }
        root
    }

    pub fn failure(&self) -> Option<RtError> {
        self.sems.failure()
    }

    /// Err(Aborted) naming the root cause if the kernel has failed.
    pub fn check_failed_at(&self, device: u32, core: u32) -> Result<()> {
        self.sems.check_failed_at(device, core)
    }
}

#[cfg(not(loom))]
impl crate::deadlock::detector::Watched for Runtime {
    fn tick(&self, process_idle_since: Option<std::time::Instant>, now: std::time::Instant) {
        self.sems.deadlock_tick(process_idle_since, now);
        self.remote_tick(now);
    }
}

/// The kinds of semaphore wait: they differ only in their timeline name and
/// in whether the count is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WaitKind {
    /// `semaphore_wait`: takes `value` from the count.
    Sem,
    /// `semaphore_wait(..., decrement=False)`: leaves the count.
    SemNoDecrement,
    /// `dma_wait` (counts bytes).
    Dma,
}

impl WaitKind {
    /// The wait's name on the timeline ("dma_wait" counts bytes).
    fn name(self) -> &'static str {
        match self {
            WaitKind::Sem => "wait",
            WaitKind::SemNoDecrement => "wait_no_decrement",
            WaitKind::Dma => "dma_wait",
        }
    }
}
