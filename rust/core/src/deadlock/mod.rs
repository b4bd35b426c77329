//! Deadlock detection.
//!
//! The monitor knows the state of every core of a launch -- running, parked
//! on a semaphore (which one, which value), in the device barrier, inside a
//! user host callback, finished -- and which devices have joined. A launch
//! is deadlocked when
//!
//! * every device has joined and every core is parked, in the barrier or
//!   finished (none running, none in a host callback), and
//! * no parked core can continue: its count is below the value it awaits
//!   and its own queue holds no DMA work (queued on_wait DMAs are run by
//!   their waiters, so a waiter's own queue is everything in flight that can
//!   still reach it), and no barrier waiter's barrier has completed.
//!
//! Nothing can then change any count: only running cores signal and start
//! DMAs. The check runs on every transition that can complete the picture
//! (a core parks, enters the barrier, finishes, leaves a host callback), so
//! such a deadlock is reported at once.
//!
//! Two cases cannot be seen from transitions alone: a device that never
//! joins the launch (its program skipped the kernel, e.g. a `lax.cond`
//! branch it did not take) and a core whose program ended without telling
//! us. For those a process-wide detector thread (see `detector`) also
//! counts devices that have not joined and cores that are not blocked in
//! mosaic_rt as stuck -- but only once the whole process has used
//! (almost) no CPU time for the configured idle window and the launch's
//! state has not changed in that time. That heuristic can be fooled by a
//! program that is stuck outside mosaic_rt on purpose (a host callback that
//! sleeps without being marked as one, blocking I/O before the kernel):
//! such a program is reported as deadlocked after the idle window. Host
//! callbacks inside kernels are marked (`callback_state`) and never count.
//!
//! Lock order: parker / barrier lock -> monitor lock -> semaphore table
//! locks. The monitor's lock is never held while waking anyone.

mod report;
// The detector thread (not part of the loom models).
#[cfg(not(loom))]
pub mod detector;

use crate::config::Topology;
use crate::error::{ErrorKind, RtError};
use crate::hash::KeyHasher;
use crate::site::SiteId;
use crate::sync::{lock, Mutex};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::{Duration, Instant};

pub use report::DmaTotals;

/// What a parked core waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub sem: u32,
    pub value: i64,
    pub site: SiteId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreState {
    /// Joined and not blocked in mosaic_rt (or not known to be).
    Running,
    Parked(Wait),
    /// In the device barrier of `generation`.
    Barrier {
        generation: u64,
        site: SiteId,
    },
    Finished,
}

/// What the analysis asks the semaphore table.
pub(crate) trait Probe {
    /// Would a waiter for `value` on (sem, gcore) continue now (count high
    /// enough, queued work to run, or the launch failed)?
    fn ready(&self, sem: u32, gcore: u32, value: i64) -> bool;
    /// (kind name, count) of `sem` on `gcore`.
    fn describe(&self, sem: u32, gcore: u32) -> (&'static str, i64);
    /// Whether `sem` counts bytes.
    fn is_dma(&self, sem: u32) -> bool;
    /// Other global cores where `sem` has a non-zero count.
    fn nonzero_elsewhere(&self, sem: u32, gcore: u32) -> Vec<(u32, i64)>;
    /// The core that last signalled a semaphore of `gcore`, if any.
    fn last_signaller(&self, gcore: u32) -> Option<u32>;
}

pub(crate) struct Monitor {
    enabled: bool,
    /// Idle window of the heuristic for devices that never joined and cores
    /// of unknown state; `None` turns the heuristic off.
    idle: Option<Duration>,
    topo: Topology,
    state: Mutex<DeadlockState>,
    /// Per global core: bytes of the DMAs started on each of its DMA
    /// semaphores. One map per core, so DMA starts on different cores do
    /// not contend, with the integer hasher (a DMA start is a hot path).
    dmas: Vec<Mutex<SemDmas>>,
}

/// DMA totals of one core's semaphores, by semaphore id.
type SemDmas = HashMap<u32, DmaTotals, BuildHasherDefault<KeyHasher>>;

pub(crate) struct DeadlockState {
    joined: Vec<bool>,
    joined_count: u32,
    cores: Vec<CoreState>,
    /// Per core: depth of user host callbacks it is inside.
    callbacks: Vec<u32>,
    in_callbacks: u32,
    /// Cores parked, in the barrier or finished.
    blocked: u32,
    barrier_generation: u64,
    last_change: Instant,
    reported: bool,
    /// Devices owned by other processes (their cores count as finished
    /// here; `remote::detect` judges the whole launch).
    remote: Vec<bool>,
    /// Other processes own devices: a local verdict is never the launch's.
    distributed: bool,
    /// Bumped on every change (termination detection compares it).
    epoch: u64,
}

impl DeadlockState {
    fn set(&mut self, gcore: u32, new: CoreState) {
        let old = std::mem::replace(&mut self.cores[gcore as usize], new);
        let was = !matches!(old, CoreState::Running);
        let is = !matches!(new, CoreState::Running);
        match (was, is) {
            (false, true) => self.blocked += 1,
            (true, false) => self.blocked -= 1,
            _ => {}
        }
        self.touch();
    }

    fn touch(&mut self) {
        self.epoch += 1;
        if !cfg!(loom) {
            self.last_change = Instant::now();
        }
    }
}

impl Monitor {
    /// `joined`: whether the devices count as joined from the start (a
    /// runtime used directly) or join one by one (a kernel launch).
    pub fn new(topo: Topology, enabled: bool, idle: Option<Duration>, joined: bool) -> Self {
        let n = topo.num_cores() as usize;
        let d = topo.num_devices as usize;
        Monitor {
            enabled,
            idle,
            topo,
            state: Mutex::new(DeadlockState {
                joined: vec![joined; d],
                joined_count: if joined { topo.num_devices } else { 0 },
                cores: vec![CoreState::Running; n],
                callbacks: vec![0; n],
                in_callbacks: 0,
                blocked: 0,
                barrier_generation: 0,
                last_change: Instant::now(),
                reported: false,
                remote: vec![false; d],
                distributed: false,
                epoch: 0,
            }),
            dmas: (0..if enabled { topo.num_cores() } else { 0 }).map(|_| Mutex::new(SemDmas::default())).collect(),
        }
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Devices owned by other processes (`local[d]` false): they count as
    /// joined, their cores as finished; verdicts are then left to the
    /// processes together (`remote::detect`).
    /// `isolated`: no transport reaches them, so local verdicts stand.
    pub fn set_remote(&self, local: &[bool], isolated: bool) {
        let mut st = lock(&self.state);
        for (d, &here) in local.iter().enumerate() {
            if here || st.remote[d] {
                continue;
            }
            st.remote[d] = true;
            st.distributed = !isolated;
            if !st.joined[d] {
                st.joined[d] = true;
                st.joined_count += 1;
            }
            for c in 0..self.topo.cores_per_device {
                st.set(self.topo.global_core(d as u32, c), CoreState::Finished);
            }
        }
    }

    /// This process's part of a distributed launch, for a termination
    /// probe: `None` while a local core runs (or may continue), else the
    /// report lines of its blocked cores (empty when all finished).
    pub fn quiescent_report(&self, probe: &dyn Probe) -> Option<Vec<String>> {
        let st = lock(&self.state);
        if st.in_callbacks > 0 || st.joined_count < self.topo.num_devices || st.blocked < self.topo.num_cores() {
            return None;
        }
        let waiting = self.stuck(&st, probe, None)?;
        if waiting == 0 {
            return Some(Vec::new());
        }
        let mut dmas = HashMap::new();
        for (g, m) in self.dmas.iter().enumerate() {
            dmas.extend(lock(m).iter().map(|(&sem, &t)| ((sem, g as u32), t)));
        }
        let text = report::describe(&self.topo, &st, probe, &dmas, None);
        Some(text.lines().skip(1).map(str::to_string).collect())
    }

    /// Bumped on every state change.
    pub fn epoch(&self) -> u64 {
        lock(&self.state).epoch
    }

    /// The state of core `gcore` (tests and diagnostics).
    pub fn core_state(&self, gcore: u32) -> CoreState {
        lock(&self.state).cores[gcore as usize]
    }

    /// `device` joined the launch (its cores are running).
    pub fn join(&self, device: u32) {
        let mut st = lock(&self.state);
        if let Some(j) = st.joined.get_mut(device as usize) {
            if !*j {
                *j = true;
                st.joined_count += 1;
            }
        }
        st.touch();
    }

    /// Core `gcore` is about to sleep waiting for `wait`; call with the
    /// parker's lock held, after its last readiness check. Returns the
    /// deadlock this completes, if any (the caller must then not sleep).
    pub fn park(&self, gcore: u32, wait: Wait, probe: &dyn Probe) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        st.set(gcore, CoreState::Parked(wait));
        self.check(&mut st, probe, false)
    }

    pub fn unpark(&self, gcore: u32) {
        if !self.enabled {
            return;
        }
        lock(&self.state).set(gcore, CoreState::Running);
    }

    /// Core 0 of `device` waits in the barrier of `generation`.
    pub fn enter_barrier(&self, device: u32, generation: u64, probe: &dyn Probe) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        let site = crate::site::current();
        st.set(self.topo.global_core(device, 0), CoreState::Barrier { generation, site });
        self.check(&mut st, probe, false)
    }

    pub fn leave_barrier(&self, device: u32) {
        if !self.enabled {
            return;
        }
        lock(&self.state).set(self.topo.global_core(device, 0), CoreState::Running);
    }

    /// The barrier of `generation` completed (all devices arrived).
    pub fn barrier_completed(&self, generation: u64) {
        if !self.enabled {
            return;
        }
        let mut st = lock(&self.state);
        st.barrier_generation = generation + 1;
        st.touch();
    }

    /// Every core of `device` is done (its program left the launch).
    pub fn finish_device(&self, device: u32, probe: &dyn Probe) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        for c in 0..self.topo.cores_per_device {
            st.set(self.topo.global_core(device, c), CoreState::Finished);
        }
        self.check(&mut st, probe, false)
    }

    /// One core's program ended (the device may go on with others).
    pub fn finish_core(&self, gcore: u32, probe: &dyn Probe) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        st.set(gcore, CoreState::Finished);
        self.check(&mut st, probe, false)
    }

    /// Core `gcore` enters (`inside`) or leaves a user host callback.
    pub fn callback(&self, gcore: u32, inside: bool, probe: &dyn Probe) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        let depth = &mut st.callbacks[gcore as usize];
        if inside {
            *depth += 1;
            if *depth == 1 {
                st.in_callbacks += 1;
            }
        } else if *depth > 0 {
            *depth -= 1;
            if *depth == 0 {
                st.in_callbacks -= 1;
            }
        }
        st.touch();
        if inside {
            None
        } else {
            self.check(&mut st, probe, false)
        }
    }

    /// Records a DMA of `bytes` started on DMA semaphore `sem` of `gcore`.
    pub fn dma_started(&self, sem: u32, gcore: u32, bytes: i64) {
        if !self.enabled {
            return;
        }
        let site = crate::site::current();
        let Some(dmas) = self.dmas.get(gcore as usize) else { return };
        let mut d = lock(dmas);
        let t = d.entry(sem).or_default();
        t.count += 1;
        t.bytes = t.bytes.saturating_add(bytes);
        t.last_site = site;
    }

    /// The detector thread's periodic look: the strict check, and the idle
    /// heuristic once the process has been idle since `process_idle_since`.
    pub fn tick(&self, probe: &dyn Probe, process_idle_since: Option<Instant>, now: Instant) -> Option<RtError> {
        if !self.enabled {
            return None;
        }
        let mut st = lock(&self.state);
        let idle = match (self.idle, process_idle_since) {
            (Some(window), Some(since)) => {
                let quiet = since.max(st.last_change);
                let for_ = now.saturating_duration_since(quiet);
                (for_ >= window).then_some(for_)
            }
            _ => None,
        };
        self.check(&mut st, probe, false).or_else(|| idle.and_then(|d| self.check_idle(&mut st, probe, d)))
    }

    fn check(&self, st: &mut DeadlockState, probe: &dyn Probe, _idle: bool) -> Option<RtError> {
        if st.reported
            || st.in_callbacks > 0
            || st.joined_count < self.topo.num_devices
            || st.blocked < self.topo.num_cores()
        {
            return None;
        }
        self.analyze(st, probe, None)
    }

    fn check_idle(&self, st: &mut DeadlockState, probe: &dyn Probe, idle_for: Duration) -> Option<RtError> {
        if st.reported || st.in_callbacks > 0 {
            return None;
        }
        self.analyze(st, probe, Some(idle_for))
    }

    /// The deadlock, if every blocked core is stuck (and, with `idle`, the
    /// running and unjoined ones count as stuck too).
    fn analyze(&self, st: &mut DeadlockState, probe: &dyn Probe, idle: Option<Duration>) -> Option<RtError> {
        let waiting = self.stuck(st, probe, idle)?;
        // Another process may still wake these cores: the processes decide
        // together (`remote::detect`).
        if waiting == 0 || st.distributed {
            return None;
        }
        st.reported = true;
        let mut dmas = HashMap::new();
        for (g, m) in self.dmas.iter().enumerate() {
            dmas.extend(lock(m).iter().map(|(&sem, &t)| ((sem, g as u32), t)));
        }
        let text = report::describe(&self.topo, st, probe, &dmas, idle);
        Some(RtError::new(ErrorKind::Deadlock, text))
    }

    /// How many cores wait with nothing to wake them; `None` if some core
    /// can continue (with `idle`, running and unjoined ones count as stuck).
    fn stuck(&self, st: &DeadlockState, probe: &dyn Probe, idle: Option<Duration>) -> Option<u32> {
        let mut waiting = 0;
        for (g, s) in st.cores.iter().enumerate() {
            let g = g as u32;
            match *s {
                CoreState::Parked(w) => {
                    if probe.ready(w.sem, g, w.value) {
                        return None;
                    }
                    waiting += 1;
                }
                CoreState::Barrier { generation, .. } => {
                    if generation < st.barrier_generation {
                        return None;
                    }
                    waiting += 1;
                }
                CoreState::Running => {
                    let device = g / self.topo.cores_per_device;
                    if idle.is_none() && st.joined[device as usize] {
                        return None;
                    }
                }
                CoreState::Finished => {}
            }
        }
        Some(waiting)
    }
}
