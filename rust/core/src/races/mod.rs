//! Race detection (`detect_races=True`): exact happens-before over vector
//! clocks, with FastTrack-style per-element shadow state (kept per chunk
//! of elements while a chunk's elements share one state).
//!
//! Threads are the simulated cores and the DMAs. Happens-before edges, as
//! in stock interpret mode: program order of each thread; a semaphore
//! signal joins the signaller's clock into the semaphore's clock for the
//! target core and a successful wait joins that into the waiter's clock;
//! the device barrier joins all core clocks; a DMA starts with its issuer's
//! clock, reads after that and writes after its read, and its semaphore
//! signals carry its clock. Unlike stock (random virtual ids shared by
//! DMAs), every running DMA has its own clock component, so no race is
//! missed; a component is reused only by a DMA whose issuer has already
//! seen the whole history of the previous owner, which keeps clocks small
//! without losing exactness.
//!
//! Everything is behind one mutex: this is off the hot path (the runtime
//! holds `Option<RaceDetector>`; `None` costs one branch per operation).

mod cell;
mod clock;
mod report;
mod shadow;

pub use cell::Memo;
#[cfg(any(feature = "internals", loom))]
pub use clock::Epoch;
pub use clock::VectorClock;
pub use report::{latest_race_log, AccessRecord, Actor, RaceLog};
pub use shadow::Shadow;

use crate::config::RacePolicy;
use crate::error::{ErrorKind, RtError};
use crate::memory::{BufferKey, MemoryTable};
use crate::region::Region;
use crate::sync::IgnorePoison;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Free DMA components examined when a DMA starts (older ones stay free;
/// missing one only costs a new component, never exactness).
const REUSE_SCAN: usize = 16;

/// A started DMA's thread.
#[derive(Clone, Copy, Debug)]
pub struct DmaThread {
    slot: u32,
    actor: Actor,
}

pub struct RaceDetector {
    policy: RacePolicy,
    /// Queued reports are Python warnings (see `Config::report_as_warnings`).
    as_warnings: bool,
    cores_per_device: u32,
    num_cores: u32,
    state: Mutex<RaceState>,
    log: Arc<RaceLog>,
}

struct RaceState {
    /// Per thread: cores `0..num_cores`, then DMA slots.
    clocks: Vec<VectorClock>,
    /// Per thread, its accesses in order (epoch value v is `records[v - 1]`).
    records: Vec<Vec<AccessRecord>>,
    /// (semaphore, global core) -> join of the clocks of its signals.
    sems: HashMap<(u32, u32), VectorClock>,
    shadows: HashMap<BufferKey, Shadow>,
    /// DMA slots no longer in use, with their final own component.
    free_slots: Vec<(u32, u32)>,
    next_dma: u64,
}

impl RaceDetector {
    /// A detector for `num_devices x cores_per_device` cores whose races are
    /// printed, queued as warnings or raised; it becomes the "most recent
    /// launch" whose races [`latest_race_log`] returns.
    /// Whether reports of policy "warn" are Python warnings (the default)
    /// or reported as stock does (see `Config::report_as_warnings`).
    pub fn reporting_as_warnings(mut self, yes: bool) -> Self {
        self.as_warnings = yes;
        self
    }

    pub fn with_policy(num_devices: u32, cores_per_device: u32, policy: RacePolicy) -> Self {
        let num_cores = num_devices * cores_per_device;
        RaceDetector {
            policy,
            as_warnings: true,
            cores_per_device,
            num_cores,
            state: Mutex::new(RaceState {
                clocks: (0..num_cores).map(|_| VectorClock::new(num_cores as usize)).collect(),
                records: (0..num_cores).map(|_| Vec::new()).collect(),
                sems: HashMap::new(),
                shadows: HashMap::new(),
                free_slots: Vec::new(),
                next_dma: 0,
            }),
            log: report::begin_launch(),
        }
    }

    pub fn log(&self) -> &RaceLog {
        &self.log
    }

    fn core_thread(&self, device: u32, core: u32) -> u32 {
        device * self.cores_per_device + core
    }

    /// Records an access by core (device, core) of `region` of buffer `key`
    /// (after the access succeeded) and reports a race if an earlier access
    /// to an overlapping element is not ordered with it.
    pub fn core_access(
        &self,
        memory: &MemoryTable,
        device: u32,
        core: u32,
        key: BufferKey,
        region: &Region,
        write: bool,
    ) -> Option<RtError> {
        let thread = self.core_thread(device, core);
        let site = crate::site::current();
        let record = AccessRecord { actor: Actor::Core { device, core }, write, key, region: region.clone(), site };
        self.access(memory, thread, record)
    }

    /// Records an access by a DMA (its read of the source or write of the
    /// destination).
    pub fn dma_access(
        &self,
        memory: &MemoryTable,
        dma: DmaThread,
        key: BufferKey,
        region: &Region,
        write: bool,
    ) -> Option<RtError> {
        let site = match dma.actor {
            Actor::Dma { site, .. } => site,
            Actor::Core { .. } => 0,
        };
        let record = AccessRecord { actor: dma.actor, write, key, region: region.clone(), site };
        self.access(memory, dma.slot, record)
    }

    /// Records the access (by vector-clock thread `thread`); with policy
    /// "raise" a race is returned as the error that fails the launch.
    fn access(&self, memory: &MemoryTable, thread: u32, record: AccessRecord) -> Option<RtError> {
        let (actor, key, write) = (record.actor, record.key, record.write);
        // The access succeeded, so the buffer exists and the region is valid.
        let Ok(touched) = memory.touched_elements(key, &record.region) else { return None };
        let mut st = self.state.lock().ignore_poison();
        let RaceState { clocks, records, shadows, .. } = &mut *st;
        let clock = &mut clocks[thread as usize];
        let now = clock.tick(thread);
        let shadow = shadows.entry(key).or_insert_with(|| Shadow::new(touched.len, touched.row));
        let mut conflict = None;
        let mut memo = Memo::default();
        touched.for_each_run(|start, len| {
            let c = shadow.access_run(start, len, now, clock, write, &mut memo);
            if conflict.is_none() {
                conflict = c;
            }
        });
        let mut raised = None;
        if let Some(c) = conflict {
            let earlier = records.get(c.earlier.thread as usize).and_then(|r| r.get(c.earlier.value as usize - 1));
            let shape = memory.info(key).map(|i| i.shape).unwrap_or_default();
            let text = report::describe(&record, earlier, &shape);
            match self.policy {
                RacePolicy::Print => self.log.record(text, true),
                RacePolicy::Warn => {
                    self.log.record(text.clone(), false);
                    crate::reports::push(crate::reports::Report {
                        category: crate::reports::Category::Race,
                        details: report::details(&record, earlier, &shape),
                        text,
                        as_warning: self.as_warnings,
                    });
                }
                RacePolicy::Raise => {
                    self.log.record(text.clone(), false);
                    let (device, core) = match actor {
                        Actor::Core { device, core } | Actor::Dma { device, core, .. } => (device, core),
                    };
                    raised = Some(RtError::new(ErrorKind::Race, text).at(device, core));
                }
            }
        }
        records[thread as usize].push(record);
        raised
    }

    /// A signal of `sem` on global core `target` by core (device, core):
    /// call before the count changes, so a waiter that sees the count also
    /// sees the clock.
    pub fn core_signal(&self, device: u32, core: u32, sem: u32, target: u32) {
        self.release(self.core_thread(device, core), sem, target);
    }

    pub fn dma_signal(&self, dma: DmaThread, sem: u32, target: u32) {
        self.release(dma.slot, sem, target);
    }

    fn release(&self, thread: u32, sem: u32, target: u32) {
        let mut st = self.state.lock().ignore_poison();
        let RaceState { clocks, sems, .. } = &mut *st;
        sems.entry((sem, target)).or_default().join(&clocks[thread as usize]);
    }

    /// A successful wait on `sem` by global core `gcore`.
    pub fn wait_done(&self, gcore: u32, sem: u32) {
        let mut st = self.state.lock().ignore_poison();
        let RaceState { clocks, sems, .. } = &mut *st;
        if let Some(c) = sems.get(&(sem, gcore)) {
            clocks[gcore as usize].join(c);
        }
    }

    /// Joins the clocks of cores `cores` (all see each other's past).
    fn sync_cores(&self, cores: std::ops::Range<u32>) {
        let mut st = self.state.lock().ignore_poison();
        let mut all = VectorClock::default();
        for g in cores.clone() {
            all.join(&st.clocks[g as usize]);
        }
        for g in cores {
            st.clocks[g as usize].join(&all);
        }
    }

    /// The device barrier: every core of every device.
    pub fn sync_all(&self) {
        self.sync_cores(0..self.num_cores);
    }

    /// The cores of one device (before and after a multi-core grid).
    pub fn sync_device(&self, device: u32) {
        let first = device * self.cores_per_device;
        self.sync_cores(first..first + self.cores_per_device);
    }

    /// A DMA started by core (device, core): a thread whose past is the
    /// issuer's.
    pub fn dma_begin(&self, device: u32, core: u32) -> DmaThread {
        let issuer = self.core_thread(device, core) as usize;
        let mut st = self.state.lock().ignore_poison();
        let id = st.next_dma;
        st.next_dma += 1;
        let actor = Actor::Dma { id, device, core, site: crate::site::current() };
        let seen = &st.clocks[issuer];
        let free = st.free_slots.len();
        let reusable = (free.saturating_sub(REUSE_SCAN)..free).rev().find(|&k| {
            let (slot, last) = st.free_slots[k];
            seen.get(slot) >= last
        });
        let clock = st.clocks[issuer].clone();
        let slot = match reusable {
            Some(k) => {
                let (slot, _) = st.free_slots.swap_remove(k);
                st.clocks[slot as usize] = clock;
                slot
            }
            None => {
                st.clocks.push(clock);
                st.records.push(Vec::new());
                (st.clocks.len() - 1) as u32
            }
        };
        DmaThread { slot, actor }
    }

    /// The clock of global core `gcore` over the cores (what travels to
    /// another process with its signals and DMAs).
    pub fn core_clock(&self, gcore: u32) -> Vec<u32> {
        let st = self.state.lock().ignore_poison();
        let c = &st.clocks[gcore as usize];
        (0..self.num_cores).map(|t| c.get(t)).collect()
    }

    /// The clock of DMA thread `dma` over the cores.
    pub fn dma_clock(&self, dma: DmaThread) -> Vec<u32> {
        self.core_clock(dma.slot)
    }

    /// The join of every core's clock (sent with a device barrier arrival).
    pub fn cores_joined(&self) -> Vec<u32> {
        let st = self.state.lock().ignore_poison();
        let mut all = VectorClock::default();
        for g in 0..self.num_cores {
            all.join(&st.clocks[g as usize]);
        }
        (0..self.num_cores).map(|t| all.get(t)).collect()
    }

    /// Every core sees `clock` (another process's cores at a device barrier).
    pub fn join_all(&self, clock: &[u32]) {
        let c = clock_of(clock);
        let mut st = self.state.lock().ignore_poison();
        for g in 0..self.num_cores {
            st.clocks[g as usize].join(&c);
        }
    }

    /// A signal of `sem` on `target` from another process, whose signaller
    /// had seen `clock` (before the count changes).
    pub fn remote_release(&self, clock: &[u32], sem: u32, target: u32) {
        let mut st = self.state.lock().ignore_poison();
        let c = clock_of(clock);
        st.sems.entry((sem, target)).or_default().join(&c);
    }

    /// A DMA started in another process by core (device, core) at `site`,
    /// whose issuer had seen `clock`: a thread here for its write.
    pub fn remote_dma_begin(&self, clock: &[u32], device: u32, core: u32, site: crate::site::SiteId) -> DmaThread {
        let mut st = self.state.lock().ignore_poison();
        let id = st.next_dma;
        st.next_dma += 1;
        let actor = Actor::Dma { id, device, core, site };
        st.clocks.push(clock_of(clock));
        st.records.push(Vec::new());
        DmaThread { slot: (st.clocks.len() - 1) as u32, actor }
    }

    /// The DMA has completed: its component may be reused.
    pub fn dma_end(&self, dma: DmaThread) {
        let mut st = self.state.lock().ignore_poison();
        let last = st.clocks[dma.slot as usize].get(dma.slot);
        st.free_slots.push((dma.slot, last));
    }

    /// Drops the shadow state of a freed buffer.
    pub fn forget(&self, key: BufferKey) {
        self.state.lock().ignore_poison().shadows.remove(&key);
    }

    /// Buffers with shadow state, for tests.
    pub fn num_shadows(&self) -> usize {
        self.state.lock().ignore_poison().shadows.len()
    }

    /// Clock components in use (cores + DMA slots), for tests.
    pub fn num_threads(&self) -> usize {
        self.state.lock().ignore_poison().clocks.len()
    }
}

fn clock_of(components: &[u32]) -> VectorClock {
    let mut c = VectorClock::new(components.len());
    for (t, &v) in components.iter().enumerate() {
        c.set(t as u32, v);
    }
    c
}
