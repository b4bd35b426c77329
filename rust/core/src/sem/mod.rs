//! Semaphores: lock-free counters, parking waits, the device barrier and the
//! kernel's failure state.
//!
//! Every semaphore has one `AtomicI64` per global core (stored densely and
//! lazily per allocation, see `counters`). A signal is an overflow-checked
//! atomic add plus a wake-up only when the target core has a parked waiter;
//! a wait is a compare-and-subtract, else it runs work queued for its
//! (semaphore, core), else it parks (see `park` for the protocol).
//!
//! The table knows nothing of its users: queued work is any [`Queued`]
//! type (the DMA engine's steps), run by the waiter's own callback, and
//! what the device barrier does on completion is the caller's callback.
//! Besides the work queued on a semaphore, each core has an inbox (see
//! `inbox`) of work it runs at its next synchronisation point: every wait
//! runs it first, whatever the semaphore.

mod barrier;
mod counters;
mod ids;
mod inbox;
mod misuse;
mod park;
mod task_queue;

use crate::spin;
pub use crate::spin::AdaptiveSpin;
pub use park::WaitRecord;

use crate::config::{Config, Topology};
use crate::deadlock::{Monitor, Probe, Wait};
use crate::error::{ErrorKind, Result, RtError};
use crate::site::SiteId;
use crate::sync::{AtomicI64, Ordering};
use barrier::DeviceBarrier;
use ids::SemIds;
use inbox::Inbox;
use mosaic_rt_wire::wire_enum;
use park::{Failure, Parker};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One core's wait on a semaphore ([`SemTable::wait_with`]).
#[derive(Clone, Copy, Debug)]
pub struct SemWait {
    pub device: u32,
    pub core: u32,
    pub sem: u32,
    /// The count awaited.
    pub value: i64,
    /// Subtract `value` once the count reaches it; false for
    /// `pl.semaphore_wait(..., decrement=False)` (the count is left as it is).
    pub decrement: bool,
    /// Where the wait is in the kernel (0: the thread's current site).
    pub site: SiteId,
}

wire_enum! {
    pub enum SemKind as setting "semaphore kind" {
        Regular = 0 => "regular",
        /// Counts bytes.
        Dma = 1 => "dma",
        Barrier = 2 => "barrier",
    }
}

/// A semaphore left with a non-zero count, or with DMAs started but never
/// waited for (on_wait mode: their data never moved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    pub sem: u32,
    pub kind: SemKind,
    pub device: u32,
    pub core: u32,
    pub count: i64,
    /// One description per DMA queued on this (semaphore, core) that never ran.
    pub pending_dmas: Vec<String>,
    /// Where the semaphore was allocated (0: unknown).
    pub site: SiteId,
    /// The start site of each DMA in `pending_dmas` (0: unknown).
    pub pending_sites: Vec<SiteId>,
}

impl SemKind {
    /// The name reports use (as Pallas spells the semaphore types).
    pub fn pallas_name(self) -> &'static str {
        match self {
            SemKind::Regular => "REGULAR",
            SemKind::Dma => "DMA",
            SemKind::Barrier => "BARRIER",
        }
    }
}

impl Leak {
    /// One line for leak reports (without the device).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} semaphore {}{} on core {} has count {}",
            self.kind.pallas_name(),
            self.sem,
            match crate::site::text(self.site) {
                Some(t) => format!(" (allocated at {t})"),
                None => String::new(),
            },
            self.core,
            self.count
        );
        if !self.pending_dmas.is_empty() {
            s.push_str(&format!(
                " and {} DMA(s) started but never waited for (their data never moved): {}",
                self.pending_dmas.len(),
                self.pending_dmas.join("; ")
            ));
        }
        s
    }
}

/// Deferred work (a DMA step) that will signal a semaphore, queued on it
/// until a core waiting on that semaphore takes it and runs it (through
/// the waiter's `run_task` callback: the table only keeps and describes it).
pub trait Queued: Send + Sync {
    /// What is still to do, for leak reports; `None` once done (e.g. the
    /// other side of the DMA ran it already).
    fn pending(&self) -> Option<String>;
    /// Where the work was started (0: unknown).
    fn site(&self) -> SiteId {
        0
    }
    /// The bytes it will signal, if it is a DMA step still to run.
    fn bytes(&self) -> Option<i64> {
        None
    }
}

/// The work of a table that never queues any (tests, models of the park
/// protocol).
pub enum NoWork {}

impl Queued for NoWork {
    fn pending(&self) -> Option<String> {
        match *self {}
    }
}

/// The semaphores of one launch; `T` is the work queued on them.
pub struct SemTable<T: Queued = NoWork> {
    topo: Topology,
    /// Misuse reports are Python warnings (see `Config::report_as_warnings`).
    reports_as_warnings: bool,
    wait_timeout: Option<Duration>,
    spin: Option<std::sync::Arc<AdaptiveSpin>>,
    ids: SemIds<T>,
    parkers: Box<[Parker]>,
    /// Per global core: work for the core's own thread (see `inbox`).
    inboxes: Box<[Inbox<T>]>,
    failure: Failure,
    barrier: DeviceBarrier,
    monitor: Monitor,
    /// Per global core: 1 + the global core that last signalled it (0:
    /// none). A hint for deadlock reports, kept with plain atomics outside
    /// the loom models.
    last_signaller: Box<[std::sync::atomic::AtomicU32]>,
    /// A launch spanning processes: before parking, a waiter may move the
    /// other processes' messages itself (see `remote::Driver`).
    driver: std::sync::OnceLock<crate::remote::Driver>,
}

/// The error a core gets when the launch failed with `root`: a deadlock is
/// every blocked core's own error, anything else an abort naming the root.
pub(crate) fn failed(root: &RtError, device: u32, core: u32) -> RtError {
    if root.kind == ErrorKind::Deadlock {
        root.clone().at(device, core)
    } else {
        RtError::aborted(root, device, core)
    }
}

#[cfg(any(test, feature = "internals", loom))] // tests and models only
impl SemTable {
    /// A table with no queued work whose devices are all present.
    pub fn new(config: &Config) -> Self {
        Self::with_devices_joined(config, true)
    }
}

impl<T: Queued> SemTable<T> {
    /// `joined`: whether every device counts as present from the start (a
    /// runtime driven directly) or joins later (a kernel launch; see
    /// [`SemTable::join`]).
    pub fn with_devices_joined(config: &Config, joined: bool) -> Self {
        let topo = config.topology();
        SemTable {
            reports_as_warnings: config.report_as_warnings,
            monitor: Monitor::new(topo, config.detect_deadlocks, config.deadlock_idle, joined),
            last_signaller: (0..topo.num_cores()).map(|_| std::sync::atomic::AtomicU32::new(0)).collect(),
            topo,
            wait_timeout: config.wait_timeout,
            spin: config.spin_before_park.clone(),
            ids: SemIds::new(topo),
            parkers: (0..topo.num_cores()).map(|_| Parker::new()).collect(),
            inboxes: (0..topo.num_cores()).map(|_| Inbox::new()).collect(),
            failure: Failure::new(),
            barrier: DeviceBarrier::new(topo.num_devices),
            driver: std::sync::OnceLock::new(),
        }
    }

    /// Lets waiters move other processes' messages before parking.
    pub fn set_driver(&self, driver: crate::remote::Driver) {
        let _ = self.driver.set(driver);
    }

    /// Allocates `count` internal semaphores on (device, core), or on every
    /// core of the device for `None`, and returns the first id. Each global
    /// core has its own id counter (from 2000); all target cores must agree.
    pub fn allocate(&self, device: u32, core: Option<u32>, kind: SemKind, count: u32) -> Result<u32> {
        self.ids.allocate_internal(device, core, kind, count)
    }

    /// The fixed-id barrier semaphore of `collective_id` (created on first use).
    pub fn barrier_semaphore(&self, collective_id: u32) -> Result<u32> {
        let owner = || format!("barrier semaphore of collective_id {collective_id}");
        self.ids.ensure_fixed(collective_id, SemKind::Barrier, owner)
    }

    /// Errs unless `sem` exists in exactly one namespace.
    pub fn check_exists(&self, sem: u32) -> Result<()> {
        self.ids.with(sem, |_, _| ())
    }

    /// Adds `inc` to `sem` on (target_device, target_core), signalled by
    /// (device, core). No target device: the signalling device; no target
    /// core: core 0 (stock's rule).
    pub fn signal(
        &self,
        device: u32,
        core: u32,
        sem: u32,
        inc: i64,
        target_device: Option<u32>,
        target_core: Option<u32>,
    ) -> Result<()> {
        if inc < 0 {
            return Err(RtError::value(format!(
                "semaphore_signal of semaphore {sem} needs an increment >= 0, got {inc}"
            )));
        }
        let src = self.topo.check(device, core)?;
        // Stock: no device id -> this device; no core index -> core 0.
        let gcore = self.topo.check(target_device.unwrap_or(device), target_core.unwrap_or(0))?;
        let last = &self.last_signaller[gcore as usize];
        if last.load(std::sync::atomic::Ordering::Relaxed) != src + 1 {
            last.store(src + 1, std::sync::atomic::Ordering::Relaxed);
        }
        self.signal_global(gcore, sem, inc)
    }

    /// Adds `inc` (>= 0) to `sem` on global core `gcore` (already
    /// validated). A count that would pass [`MAX_COUNT`] is an error and
    /// leaves the count unchanged.
    #[inline]
    pub(crate) fn signal_global(&self, gcore: u32, sem: u32, inc: i64) -> Result<()> {
        let added = self.ids.with_fast(sem, |s, off| add_count(s.counter_if_present(off, gcore)?, inc).ok());
        let result = if added.is_none() { self.signal_slow(gcore, sem, inc) } else { Ok(()) };
        // Also after a failed add: a waiter may have parked while the count
        // was briefly over the limit, and must look again.
        self.parkers[gcore as usize].wake(Some(sem));
        result
    }

    /// `signal_global` off the hot path: fixed ids, first use of a counter
    /// page, overflow and unknown ids (with their errors).
    #[cold]
    #[inline(never)]
    fn signal_slow(&self, gcore: u32, sem: u32, inc: i64) -> Result<()> {
        self.ids
            .with(sem, |s, off| add_count(s.counter(off, gcore)?, inc).map_err(|c| self.overflow(sem, gcore, c, inc)))?
    }

    #[cold]
    fn overflow(&self, sem: u32, gcore: u32, count: i64, inc: i64) -> RtError {
        let (device, core) = (gcore / self.topo.cores_per_device, gcore % self.topo.cores_per_device);
        RtError::value(format!(
            "semaphore {sem} on device {device}, core {core} overflows: count {count} + increment \
             {inc} exceeds the largest count {MAX_COUNT} (2**62)"
        ))
    }

    /// Queues `task` to be run by a core waiting on `sem` on global core `gcore`.
    pub(crate) fn enqueue(&self, sem: u32, gcore: u32, task: T) -> Result<()> {
        self.ids.with(sem, |s, off| s.push_task(off, gcore, task))?;
        self.parkers[gcore as usize].wake(Some(sem));
        Ok(())
    }

    /// Hands `task` to global core `gcore`, to run on its own thread at its
    /// next synchronisation point (see `inbox`). Gives the task back if the
    /// core's program has ended (its inbox is closed): the caller runs it.
    pub fn send_to_core(&self, gcore: u32, task: T) -> Option<T> {
        match self.inboxes[gcore as usize].push(task) {
            Ok(()) => {
                // Whatever it waits on: a core parked anywhere runs its inbox.
                self.parkers[gcore as usize].wake(None);
                None
            }
            Err(task) => Some(task),
        }
    }

    /// Runs the work in the inbox of (device, core) through `run_task`,
    /// oldest first, until it is empty: the core is at a synchronisation
    /// point. A failed launch runs nothing more.
    pub fn run_inbox(&self, device: u32, core: u32, run_task: &mut dyn FnMut(T) -> Result<()>) -> Result<()> {
        let gcore = self.topo.check(device, core)?;
        let inbox = &self.inboxes[gcore as usize];
        while inbox.has_work() {
            if let Some(root) = self.failure.get() {
                return Err(failed(&root, device, core));
            }
            match inbox.pop() {
                Some(task) => run_task(task)?,
                None => break,
            }
        }
        Ok(())
    }

    /// The program of (device, core) ended: its inbox takes nothing more
    /// (senders then run their work themselves) and what it holds runs now.
    pub fn close_inbox(&self, device: u32, core: u32, run_task: &mut dyn FnMut(T) -> Result<()>) -> Result<()> {
        let gcore = self.topo.check(device, core)?;
        self.inboxes[gcore as usize].close();
        self.run_inbox(device, core, run_task)
    }

    /// Whether the inbox of (device, core) holds work.
    #[cfg(any(test, feature = "internals", loom))] // tests and models only
    pub fn inbox_has_work(&self, device: u32, core: u32) -> Result<bool> {
        let gcore = self.topo.check(device, core)?;
        Ok(self.inboxes[gcore as usize].has_work())
    }

    /// What the inbox of (device, core) holds, oldest first (reports).
    pub fn inbox_pending(&self, device: u32, core: u32) -> Result<Vec<String>> {
        let gcore = self.topo.check(device, core)?;
        let mut out = Vec::new();
        self.inboxes[gcore as usize].each(|t| out.extend(t.pending()));
        Ok(out)
    }

    /// Blocks until `sem` on (device, core) reaches `value`, then subtracts
    /// it. Work queued on the semaphore is handed to `run_task` (which runs
    /// it: queued DMAs touch memory the table knows nothing of), and so is
    /// the work in the core's inbox (a wait is a synchronisation point). `site`:
    /// where the wait is in the kernel (0: the thread's current site).
    #[cfg(any(test, feature = "internals", loom))] // tests and models (the runtime calls `wait_with`)
    #[inline]
    pub fn wait(
        &self,
        device: u32,
        core: u32,
        sem: u32,
        value: i64,
        site: SiteId,
        run_task: &mut dyn FnMut(T) -> Result<()>,
    ) -> Result<()> {
        self.wait_with(SemWait { device, core, sem, value, decrement: true, site }, run_task)
    }

    /// [`Self::wait`] of `w`, subtracting its value once the count reaches
    /// it only with `w.decrement`. Either way the wait parks, runs queued
    /// work, takes part in deadlock detection and times out alike.
    #[inline]
    pub fn wait_with(&self, w: SemWait, run_task: &mut dyn FnMut(T) -> Result<()>) -> Result<()> {
        let SemWait { device, core, sem, value, decrement, site } = w;
        let take = |count: &AtomicI64, value: i64| {
            if decrement {
                try_take(count, value)
            } else {
                can_take(count.load(Ordering::SeqCst), value)
            }
        };
        if !(0..=MAX_COUNT).contains(&value) {
            return Err(RtError::value(format!(
                "semaphore_wait on semaphore {sem} needs a value in [0, {MAX_COUNT}] (2**62), got {value}"
            )));
        }
        let gcore = self.topo.check(device, core)?;
        let inbox = &self.inboxes[gcore as usize];
        // Fast path: the count is there already (no reference counting, no
        // error values). The inbox is looked at after the count is taken:
        // work handed over before a signal the wait saw is then seen too.
        if !self.failure.is_set()
            && self.ids.with_fast(sem, |s, off| take(s.counter_if_present(off, gcore)?, value).then_some(())).is_some()
        {
            return self.run_inbox(device, core, run_task);
        }
        let sem_ref = self.ids.get(sem)?;
        let (s, off) = (&*sem_ref.block, sem_ref.off);
        let count = s.counter(off, gcore)?;
        let parker = &self.parkers[gcore as usize];
        let record = WaitRecord { sem, value };
        let site = if site != 0 { site } else { crate::site::current() };
        let wait = Wait { sem, value, site };
        let mut deadline = None;
        let mut spun = false;
        let mut checked = false;
        loop {
            if let Some(root) = self.failure.get() {
                return Err(failed(&root, device, core));
            }
            // Before the count: what lands may be what the wait waits for.
            if let Some(task) = inbox.pop() {
                run_task(task)?;
                continue;
            }
            if take(count, value) {
                // And after it (see the fast path).
                return self.run_inbox(device, core, run_task);
            }
            if !checked && s.kind == SemKind::Dma {
                checked = true;
                misuse::check_dma_wait(s, off, gcore, SemWait { site: wait.site, ..w }, self.reports_as_warnings);
            }
            if let Some(task) = s.pop_task(off, gcore) {
                run_task(task)?;
                continue;
            }
            // A launch spanning processes drives instead: watching the
            // counter alone, nothing would deliver the frame it waits for.
            if !spun && self.driver.get().is_none() {
                spun = true;
                if let Some((policy, budget)) = self.spin.as_ref().and_then(|p| Some((p, p.plan()?))) {
                    let outcome = spin::spin(budget, || {
                        self.failure.is_set()
                            || can_take(count.load(Ordering::SeqCst), value)
                            || s.has_task(off, gcore)
                            || inbox.has_work()
                    });
                    policy.record(outcome);
                    continue;
                }
            }
            if let Some(drive) = self.driver.get() {
                let ready = || {
                    self.failure.is_set()
                        || can_take(count.load(Ordering::SeqCst), value)
                        || s.has_task(off, gcore)
                        || inbox.has_work()
                };
                if drive(&ready) {
                    continue;
                }
            }
            let deadline = *deadline.get_or_insert_with(|| deadline_after(self.wait_timeout));
            let parked = parker.park(
                record,
                deadline,
                || {
                    self.failure.is_set()
                        || can_take(count.load(Ordering::SeqCst), value)
                        || s.has_task(off, gcore)
                        || inbox.has_work()
                },
                || self.monitor.park(gcore, wait, self),
                || self.monitor.unpark(gcore),
            );
            let timed_out = match parked {
                Ok(t) => t,
                Err(deadlock) => {
                    let root = self.fail(deadlock);
                    return Err(failed(&root, device, core));
                }
            };
            // On timeout look once more: a wake-up may have raced the deadline.
            if timed_out && !self.failure.is_set() && !s.has_task(off, gcore) && !inbox.has_work() {
                if take(count, value) {
                    return self.run_inbox(device, core, run_task);
                }
                let secs = self.wait_timeout.unwrap_or_default().as_secs_f64();
                return Err(RtError::new(
                    ErrorKind::Timeout,
                    format!(
                        "semaphore {sem} on device {device}, core {core} waited {secs}s for count >= \
                         {value}; count is {}",
                        count.load(Ordering::SeqCst)
                    ),
                ));
            }
        }
    }

    pub fn read(&self, device: u32, core: u32, sem: u32) -> Result<i64> {
        let gcore = self.topo.check(device, core)?;
        self.ids.with(sem, |s, off| s.peek(off, gcore))
    }

    /// The whole count of `sem` on (device, core), leaving 0: first the work
    /// queued on it runs (`run_task`, as a wait runs it), so every DMA that
    /// signals it there has landed. A semaphore a kernel returns to the
    /// program is taken this way at kernel end: its count goes on to the
    /// next kernel that receives it, instead of being a leak.
    pub fn take_all(&self, device: u32, core: u32, sem: u32, run_task: &mut dyn FnMut(T) -> Result<()>) -> Result<i64> {
        let gcore = self.topo.check(device, core)?;
        let sem_ref = self.ids.get(sem)?;
        let (s, off) = (&*sem_ref.block, sem_ref.off);
        while let Some(task) = s.pop_task(off, gcore) {
            if let Some(root) = self.failure.get() {
                return Err(failed(&root, device, core));
            }
            run_task(task)?;
        }
        Ok(s.counter(off, gcore)?.swap(0, Ordering::SeqCst))
    }

    /// Rendezvous of all devices (one call per device). `on_complete` runs
    /// once per generation, by the last device to arrive, before any device
    /// leaves.
    #[cfg(any(test, feature = "internals", loom))] // tests and models (the runtime calls `device_barrier_with`)
    pub fn device_barrier(&self, device: u32, on_complete: &dyn Fn()) -> Result<()> {
        self.device_barrier_with(device, on_complete, &|_, _| {})
    }

    /// [`Self::device_barrier`] of a launch spanning processes:
    /// `on_local(generation, count)` runs when this process's last device
    /// arrives (to tell the others).
    pub fn device_barrier_with(&self, device: u32, on_complete: &dyn Fn(), on_local: &dyn Fn(u64, u32)) -> Result<()> {
        self.topo.check(device, 0)?;
        let r =
            self.barrier.arrive(&self.failure, device, self.wait_timeout, on_complete, on_local, &self.monitor, self);
        match r {
            Err(e) if e.kind == ErrorKind::Deadlock && self.failure.get().is_none() => {
                let root = self.fail(e);
                Err(failed(&root, device, 0))
            }
            r => r,
        }
    }

    /// `count` devices of another process arrived at device barrier `generation`.
    pub fn device_barrier_remote(&self, generation: u64, count: u32, on_complete: &dyn Fn()) {
        self.barrier.arrive_remote(generation, count, on_complete, &self.monitor);
    }

    /// Devices owned by other processes (`local[d]` false; see
    /// `Monitor::set_remote`).
    /// `isolated`: no transport reaches them (the barrier waits for the
    /// local devices only).
    pub fn set_remote(&self, local: &[bool], isolated: bool) {
        self.monitor.set_remote(local, isolated);
        self.barrier.set_local(local.iter().filter(|&&l| l).count() as u32, isolated);
    }

    /// This process's part of a distributed launch for a termination probe
    /// (see `Monitor::quiescent_report`) and the monitor's epoch.
    pub fn quiescence(&self) -> (Option<Vec<String>>, u64) {
        (self.monitor.quiescent_report(self), self.monitor.epoch())
    }

    /// Whether semaphore `sem` exists (in either namespace).
    pub fn exists(&self, sem: u32) -> bool {
        self.ids.with(sem, |_, _| ()).is_ok()
    }

    // ------------------------------------------------ deadlock detection

    /// `device` joined the launch.
    pub fn join(&self, device: u32) -> Result<()> {
        self.topo.check(device, 0)?;
        self.monitor.join(device);
        Ok(())
    }

    /// Every core of `device` is done (its program left the launch).
    pub fn finish_device(&self, device: u32) -> Result<()> {
        self.topo.check(device, 0)?;
        if let Some(e) = self.monitor.finish_device(device, self) {
            self.fail(e);
        }
        Ok(())
    }

    /// The program of core (device, core) ended.
    pub fn finish_core(&self, device: u32, core: u32) -> Result<()> {
        let g = self.topo.check(device, core)?;
        if let Some(e) = self.monitor.finish_core(g, self) {
            self.fail(e);
        }
        Ok(())
    }

    /// Core (device, core) enters (`inside`) or leaves a user host callback.
    pub fn callback_state(&self, device: u32, core: u32, inside: bool) -> Result<()> {
        let g = self.topo.check(device, core)?;
        if let Some(e) = self.monitor.callback(g, inside, self) {
            self.fail(e);
        }
        Ok(())
    }

    /// The detector thread's periodic look (see `deadlock::detector`).
    pub fn deadlock_tick(&self, process_idle_since: Option<Instant>, now: Instant) {
        if self.failure.is_set() {
            return;
        }
        if let Some(e) = self.monitor.tick(self, process_idle_since, now) {
            self.fail(e);
        }
    }

    /// The state deadlock detection sees for (device, core).
    pub fn core_state(&self, device: u32, core: u32) -> Result<crate::deadlock::CoreState> {
        let g = self.topo.check(device, core)?;
        Ok(self.monitor.core_state(g))
    }

    /// Records a DMA of `bytes` started on DMA semaphore `sem` of `gcore`
    /// (for deadlock reports; nothing without deadlock detection).
    pub(crate) fn dma_started(&self, sem: u32, gcore: u32, bytes: i64) {
        if self.monitor.enabled() {
            self.monitor.dma_started(sem, gcore, bytes);
        }
    }

    /// Semaphores with a non-zero count or DMAs queued but never run, on a
    /// core of `device` (every device for `None`), sorted by (device, core,
    /// semaphore id). Issues the held-back misuse reports of those
    /// semaphores and forgets the others of `device`.
    pub fn leaks(&self, device: Option<u32>) -> Result<Vec<Leak>> {
        if let Some(d) = device {
            self.topo.check(d, 0)?;
        }
        let cpd = self.topo.cores_per_device;
        let mut found: BTreeMap<(u32, u32, u32, u8), Leak> = BTreeMap::new();
        let wanted = |g: u32| device.is_none_or(|want| want == g / cpd);
        for s in self.ids.all() {
            let mut nonzero = Vec::new();
            s.for_each_nonzero(|off, g, count| {
                if wanted(g) {
                    nonzero.push((off, g, count, Vec::new()));
                }
            });
            let pending = s.pending_work(wanted).into_iter().map(|(off, g, dmas)| (off, g, 0, dmas));
            let alloc_site = s.site;
            for (off, g, count, dmas) in nonzero.into_iter().chain(pending) {
                let (d, core) = (g / cpd, g % cpd);
                let sem = s.first + off;
                let leak = found.entry((d, core, sem, s.kind as u8)).or_insert_with(|| Leak {
                    sem,
                    kind: s.kind,
                    device: d,
                    core,
                    count: 0,
                    pending_dmas: Vec::new(),
                    site: alloc_site,
                    pending_sites: Vec::new(),
                });
                leak.count += count;
                for (text, site) in dmas {
                    leak.pending_dmas.push(text);
                    leak.pending_sites.push(site);
                }
            }
        }
        // Suspect waits of these cores: reported where their semaphore
        // leaks, dropped where it ended clean (see `misuse`).
        for s in self.ids.all() {
            for (off, g, report) in s.take_suspects(wanted) {
                if found.contains_key(&(g / cpd, g % cpd, s.first + off, s.kind as u8)) {
                    crate::reports::push(report);
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// Counter pages (of 512 counters) materialised so far: memory diagnostics.
    pub fn counter_pages_in_use(&self) -> usize {
        self.ids.all().iter().map(|b| b.pages_in_use()).sum()
    }

    /// Records `err` unless a failure is recorded already, wakes every parked
    /// waiter and the barrier, and returns the recorded root cause.
    pub fn fail(&self, err: RtError) -> RtError {
        let root = self.failure.record(err);
        for p in self.parkers.iter() {
            p.wake(None);
        }
        self.barrier.wake_all();
        root
    }

    pub fn failure(&self) -> Option<RtError> {
        self.failure.get()
    }

    /// Err(Aborted) naming the root cause if the kernel has failed.
    pub fn check_failed_at(&self, device: u32, core: u32) -> Result<()> {
        match self.failure.get() {
            Some(root) => Err(RtError::aborted(&root, device, core)),
            None => Ok(()),
        }
    }

    /// What the core is parked on right now (deadlock-detector seam).
    #[cfg(any(test, feature = "internals", loom))] // tests only
    pub fn waiting_on(&self, device: u32, core: u32) -> Result<Option<WaitRecord>> {
        let gcore = self.topo.check(device, core)?;
        Ok(self.parkers[gcore as usize].waiting_on())
    }
}

/// The deadline `timeout` from now; `None` (no deadline) without a timeout
/// or when the deadline is not representable (a huge timeout never ends).
pub(crate) fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// The largest semaphore count (2**62). Far enough below `i64::MAX` that a
/// signal can add first and check afterwards.
pub const MAX_COUNT: i64 = 1 << 62;

/// Increments up to this take the fast path of [`add_count`]. Counts over
/// `MAX_COUNT` exist only while such an add is being taken back, so a count
/// can never pass `MAX_COUNT + FAST_INC * (threads adding at once)`, far
/// below `i64::MAX`.
const FAST_INC: i64 = 1 << 32;

/// Adds `inc` (>= 0) to `count` unless the sum would pass `MAX_COUNT`; on
/// overflow returns the count, which is then unchanged.
///
/// Fast path: one `fetch_add`, taken back when it went over the limit. While
/// an over-limit add is in flight the count is above `MAX_COUNT`, where
/// waiters never take from it and other adds fail their fast path; the
/// exact slow path waits such transients out.
#[inline]
fn add_count(count: &AtomicI64, inc: i64) -> std::result::Result<(), i64> {
    if inc <= FAST_INC {
        let old = count.fetch_add(inc, Ordering::SeqCst);
        if old <= MAX_COUNT - inc {
            return Ok(());
        }
        count.fetch_sub(inc, Ordering::SeqCst);
    }
    add_count_exact(count, inc)
}

#[cold]
#[inline(never)]
fn add_count_exact(count: &AtomicI64, inc: i64) -> std::result::Result<(), i64> {
    let mut current = count.load(Ordering::SeqCst);
    loop {
        if current > MAX_COUNT {
            // Another signal's over-limit add, about to be taken back.
            crate::sync::yield_now();
            current = count.load(Ordering::SeqCst);
            continue;
        }
        if current > MAX_COUNT - inc {
            return Err(current);
        }
        match count.compare_exchange_weak(current, current + inc, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return Ok(()),
            Err(now) => current = now,
        }
    }
}

/// Whether a wait for `value` may take from `count`: never from a count over
/// `MAX_COUNT` (that is an add being taken back).
#[inline]
fn can_take(count: i64, value: i64) -> bool {
    count >= value && count <= MAX_COUNT
}

/// Subtracts `value` if [`can_take`].
#[inline]
fn try_take(count: &AtomicI64, value: i64) -> bool {
    let mut current = count.load(Ordering::SeqCst);
    while can_take(current, value) {
        match count.compare_exchange_weak(current, current - value, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return true,
            Err(now) => current = now,
        }
    }
    false
}

impl<T: Queued> Probe for SemTable<T> {
    fn ready(&self, sem: u32, gcore: u32, value: i64) -> bool {
        self.failure.is_set()
            || self.inboxes.get(gcore as usize).is_some_and(|i| i.has_work())
            || self
                .ids
                .with(sem, |s, off| can_take(s.peek(off, gcore), value) || s.has_task(off, gcore))
                .unwrap_or(true)
    }

    fn describe(&self, sem: u32, gcore: u32) -> (&'static str, i64) {
        self.ids.with(sem, |s, off| (s.kind.pallas_name(), s.peek(off, gcore))).unwrap_or(("unknown", 0))
    }

    fn is_dma(&self, sem: u32) -> bool {
        self.ids.with(sem, |s, _| s.kind == SemKind::Dma).unwrap_or(false)
    }

    fn nonzero_elsewhere(&self, sem: u32, gcore: u32) -> Vec<(u32, i64)> {
        self.ids
            .with(sem, |s, off| {
                (0..self.topo.num_cores())
                    .filter(|&g| g != gcore)
                    .filter_map(|g| {
                        let c = s.peek(off, g);
                        (c != 0).then_some((g, c))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn last_signaller(&self, gcore: u32) -> Option<u32> {
        let v = self.last_signaller.get(gcore as usize)?.load(std::sync::atomic::Ordering::Relaxed);
        v.checked_sub(1)
    }
}
