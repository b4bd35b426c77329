//! The DMA engine: validation, byte counting, eager or on_wait execution.
//!
//! A DMA copies a region of a buffer of (device, core) to a region of a
//! buffer of (dst_device, dst_core) and signals, with the bytes it moved,
//! its receive semaphore -- and, for a remote copy, its send semaphore on
//! the issuing core.
//!
//! * `eager`: [`start`] copies at once, buffer to buffer, and signals.
//! * `on_wait`: [`start`] validates the DMA (so a bad one fails at its
//!   start, as an eager one would) and queues its steps on the semaphores
//!   they signal: the read step on the send semaphore (remote copies only),
//!   the rest on the receive semaphore. A core waiting on one of them runs
//!   the step ([`DmaStep::run`]); the [`DmaMachine`] makes each step run
//!   exactly once, whichever core gets there first.
//! * `tpu`: a copy within the issuing core as `eager`; a copy to another
//!   core reads its source at [`start`] and lands at the destination
//!   core's next synchronisation point (`landing.rs`, which says why).
//!
//! A side seen through a ref view (a bitcast or reshape of its region) is
//! read or written through a byte map (`view.rs`, [`DmaView`]); the
//! semaphores then count the view's bytes.
//!
//! The engine knows nothing of the runtime: it works on a [`DmaEnv`], the
//! parts of a runtime a DMA touches, and the semaphore table only keeps its
//! steps and hands them to waiters.

mod landing;
mod machine;
pub(crate) mod remote;
mod view;
mod view_direct;
mod view_entries;
mod view_map;
mod view_rows;

pub use machine::DmaMachine;
pub use view::DmaView;
pub use view_entries::ViewEntries;
pub use view_map::{UnitLayout, ViewMap};

use crate::config::{DmaMode, Topology};
use crate::error::{Result, RtError};
use crate::memory::{Access, BufferKey, MemRef, MemorySpace, MemoryTable};
use crate::races::{DmaThread, RaceDetector};
use crate::region::Region;
use crate::sem::{Queued, SemTable};
use crate::site::{self, SiteId};
use crate::sync::Arc;
use crate::trace::{self, TraceArg, TraceDma, Tracer};

/// A DMA from a region of a buffer of (device, core) to a region of a buffer
/// of (dst_device, dst_core): by default remote copies land on the same
/// local core of the target device.
#[derive(Clone, Debug)]
pub struct DmaRequest {
    pub device: u32,
    pub core: u32,
    pub src_space: MemorySpace,
    pub src_id: u32,
    pub src_region: Region,
    pub dst_space: MemorySpace,
    pub dst_id: u32,
    pub dst_region: Region,
    pub dst_sem: u32,
    /// Set exactly for remote copies (with `dst_device`).
    pub src_sem: Option<u32>,
    pub dst_device: Option<u32>,
    /// The destination core (`None`: the issuing core). jax 0.12 lets a
    /// remote DMA's device id name a core.
    pub dst_core: Option<u32>,
}

impl DmaRequest {
    fn src(&self) -> MemRef<'_> {
        MemRef::new(self.device, self.core, self.src_space, self.src_id, &self.src_region)
    }

    fn dst(&self, plan: &DmaRoute) -> MemRef<'_> {
        MemRef::new(plan.dst_device, plan.dst_core, self.dst_space, self.dst_id, &self.dst_region)
    }
}

/// What the DMA engine works with, borrowed from a runtime for one call.
#[derive(Clone, Copy)]
pub(crate) struct DmaEnv<'a> {
    pub topo: Topology,
    pub mode: DmaMode,
    pub memory: &'a MemoryTable,
    pub sems: &'a SemTable<DmaStep>,
    /// `Some` exactly with race detection.
    pub races: Option<&'a RaceDetector>,
    /// `Some` exactly with a timeline.
    pub trace: Option<&'a Tracer>,
    /// `Some` exactly when other processes own devices of the launch.
    pub remote: Option<&'a crate::remote::Link>,
}

/// Where a validated DMA goes and how many bytes it moves.
#[derive(Clone, Copy)]
struct DmaRoute {
    dst_device: u32,
    dst_core: u32,
    src_gcore: u32,
    dst_gcore: u32,
    bytes: i64,
}

/// A DMA of zero bytes (a slice of size 0, e.g. `pl.ds(end, n)` with `n`
/// traced to 0) touches no memory, wherever its slices start: a TPU runs it
/// at the end of an array, and so does stock in on_wait mode (its wait for
/// 0 bytes never runs the DMA; its eager mode raises an out-of-bounds read).
/// Loads and stores keep stock's bounds rules. (An eager DMA's copy finds
/// it out itself: `MemoryTable::copy`.)
fn moves_nothing(plan: &DmaRoute) -> bool {
    plan.bytes == 0
}

/// The whole DMA in one go (eager mode, or an on_wait DMA whose read has
/// not run yet): a direct buffer-to-buffer copy (no intermediate Vec; the
/// copy checks dtypes and shapes), then the send signal (remote copies
/// only) and the receive signal, both counting the bytes the copy moved.
fn copy_whole(
    env: &DmaEnv,
    r: &DmaRequest,
    view: Option<&DmaView>,
    plan: &DmaRoute,
    race: Option<DmaThread>,
    tr: Option<TraceDma>,
) -> Result<i64> {
    // Not `Runtime::copy`: the accesses are the DMA's, not the issuing core's.
    let bytes = match view {
        // An empty copy moves nothing (`moves_nothing`): `copy` returns 0.
        None => env.memory.copy(r.src(), r.dst(plan)),
        Some(v) => v.copy(env.memory, r.src(), r.dst(plan)),
    };
    let bytes = bytes.map_err(|e| e.at(r.device, r.core))? as i64;
    let plan = &DmaRoute { bytes, ..*plan };
    note_read(env, r, race)?;
    note_write(env, r, plan, race)?;
    if let Some(src_sem) = r.src_sem {
        note_signal(env, race, src_sem, plan.src_gcore);
        trace::dma_signal(env.trace, tr, src_sem, plan.src_gcore);
        env.sems.signal_global(plan.src_gcore, src_sem, plan.bytes)?;
    }
    note_signal(env, race, r.dst_sem, plan.dst_gcore);
    note_end(env, race);
    trace::dma_signal(env.trace, tr, r.dst_sem, plan.dst_gcore);
    trace::dma_end(env.trace, tr);
    env.sems.signal_global(plan.dst_gcore, r.dst_sem, plan.bytes)?;
    Ok(plan.bytes)
}

// Race-detector hooks (`race` is Some exactly when detection is on).

fn note_read(env: &DmaEnv, r: &DmaRequest, race: Option<DmaThread>) -> Result<()> {
    if let (Some(races), Some(t)) = (env.races, race) {
        if let Some(e) = races.dma_access(env.memory, t, r.src().key(), &r.src_region, false) {
            return Err(e);
        }
    }
    Ok(())
}

fn note_write(env: &DmaEnv, r: &DmaRequest, plan: &DmaRoute, race: Option<DmaThread>) -> Result<()> {
    if let (Some(races), Some(t)) = (env.races, race) {
        if let Some(e) = races.dma_access(env.memory, t, r.dst(plan).key(), &r.dst_region, true) {
            return Err(e);
        }
    }
    Ok(())
}

/// Before the signal itself, so a waiter that sees the count sees the clock.
fn note_signal(env: &DmaEnv, race: Option<DmaThread>, sem: u32, gcore: u32) {
    if let (Some(races), Some(t)) = (env.races, race) {
        races.dma_signal(t, sem, gcore);
    }
}

fn note_end(env: &DmaEnv, race: Option<DmaThread>) {
    if let (Some(races), Some(t)) = (env.races, race) {
        races.dma_end(t);
    }
}

/// A queued DMA, shared by the steps that may run it.
pub(crate) struct QueuedDma {
    req: DmaRequest,
    view: Option<DmaView>,
    plan: DmaRoute,
    machine: DmaMachine<Vec<u8>>,
    race: Option<DmaThread>,
    /// Where it was started.
    site: SiteId,
    trace: Option<TraceDma>,
}

impl QueuedDma {
    /// Loads the source region, then signals the send semaphore (remote only).
    fn load_source(&self, env: &DmaEnv) -> Result<Vec<u8>> {
        let (r, plan) = (&self.req, &self.plan);
        // Bounds first: a huge out-of-bounds region fails without allocating.
        // Not `Runtime::load`: the access is the DMA's, not the issuing core's.
        let data = match &self.view {
            _ if moves_nothing(plan) => Ok(Vec::new()),
            Some(v) => v.load(env.memory, r.src()),
            None => env.memory.check_access(r.src(), Access::Read).and_then(|n| {
                let mut data = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
                env.memory.load(r.src(), &mut data).map(|()| data)
            }),
        };
        let data = data.map_err(|e| e.at(r.device, r.core))?;
        note_read(env, r, self.race)?;
        if let Some(src_sem) = r.src_sem {
            note_signal(env, self.race, src_sem, plan.src_gcore);
            trace::dma_signal(env.trace, self.trace, src_sem, plan.src_gcore);
            env.sems.signal_global(plan.src_gcore, src_sem, plan.bytes)?;
        }
        Ok(data)
    }

    /// Stores into the destination, then signals the receive semaphore.
    fn store_destination(&self, env: &DmaEnv, data: &[u8]) -> Result<()> {
        let (r, plan) = (&self.req, &self.plan);
        let stored = match &self.view {
            _ if moves_nothing(plan) => Ok(()),
            Some(v) => v.store(env.memory, r.dst(plan), data),
            None => env.memory.store(r.dst(plan), data),
        };
        stored.map_err(|e| e.at(plan.dst_device, plan.dst_core))?;
        note_write(env, r, plan, self.race)?;
        note_signal(env, self.race, r.dst_sem, plan.dst_gcore);
        note_end(env, self.race);
        trace::dma_signal(env.trace, self.trace, r.dst_sem, plan.dst_gcore);
        trace::dma_end(env.trace, self.trace);
        env.sems.signal_global(plan.dst_gcore, r.dst_sem, plan.bytes)
    }

    /// For leak reports: names both buffers, both semaphores and the cores.
    fn describe(&self) -> String {
        let (r, plan) = (&self.req, &self.plan);
        let side = |m: MemRef<'_>| {
            let key = m.key();
            if m.region.dims.is_empty() {
                format!("{key}")
            } else {
                format!("{key}{}", m.region.slice_repr())
            }
        };
        let sems = match r.src_sem {
            Some(s) => format!(
                "send semaphore {s} on device {}, receive semaphore {} on device {}",
                r.device, r.dst_sem, plan.dst_device
            ),
            None => format!("semaphore {}", r.dst_sem),
        };
        format!(
            "DMA of {} bytes from {} to {}, started on device {}, core {}{} ({sems})",
            plan.bytes,
            side(r.src()),
            side(r.dst(plan)),
            r.device,
            r.core,
            site::at(self.site)
        )
    }
}

/// A step of a queued (on_wait) DMA, queued on the semaphore it signals.
pub(crate) enum DmaStep {
    /// The send side of a remote DMA (on its send semaphore): the read.
    Read(Arc<QueuedDma>),
    /// The receive side (on its receive semaphore): whatever is left.
    Write(Arc<QueuedDma>),
    /// The send side of a DMA to another process: the read (its data is
    /// then sent there).
    RemoteRead(std::sync::Arc<remote::OutgoingDma>),
    /// The receive side of a DMA from another process.
    RemoteWrite(std::sync::Arc<remote::IncomingDma>),
    /// An eager DMA from another process, landing (`tpu` mode, in the
    /// destination core's inbox).
    RemoteLanding(Box<remote::Landing>),
}

impl DmaStep {
    /// Runs the step unless another core ran it already.
    pub(crate) fn run(self, env: &DmaEnv) -> Result<()> {
        match self {
            // The read is counted done once its step succeeded: a failed
            // step leaves the DMA Started, to be read again.
            DmaStep::Read(d) => d.machine.read(|| {
                let data = d.load_source(env)?;
                env.memory.dma_read_done(d.req.device);
                Ok(data)
            }),
            DmaStep::Write(d) => d.machine.read_write(
                || {
                    copy_whole(env, &d.req, d.view.as_ref(), &d.plan, d.race, d.trace)?;
                    env.memory.dma_read_done(d.req.device);
                    Ok(())
                },
                |data| d.store_destination(env, data),
            ),
            DmaStep::RemoteRead(d) => {
                let link = env.remote.ok_or_else(|| RtError::internal("a remote DMA step without a link"))?;
                d.read_once(env, link)?;
                link.take_outgoing(d.id());
                Ok(())
            }
            DmaStep::RemoteWrite(d) => {
                let link = env.remote.ok_or_else(|| RtError::internal("a remote DMA step without a link"))?;
                d.run(env, link)
            }
            DmaStep::RemoteLanding(d) => d.run(env),
        }
    }

    /// Whether the step still has something to do.
    fn is_pending(&self) -> bool {
        match self {
            DmaStep::Read(d) => d.machine.is_started(),
            DmaStep::Write(d) => !d.machine.is_completed(),
            DmaStep::RemoteRead(d) => d.is_pending(),
            DmaStep::RemoteWrite(d) => d.is_pending(),
            // In an inbox until it runs, and run once (it is moved out).
            DmaStep::RemoteLanding(_) => true,
        }
    }
}

impl Queued for DmaStep {
    fn pending(&self) -> Option<String> {
        self.is_pending().then(|| match self {
            DmaStep::Read(d) | DmaStep::Write(d) => d.describe(),
            DmaStep::RemoteRead(d) => d.describe(),
            DmaStep::RemoteWrite(d) => d.describe(),
            DmaStep::RemoteLanding(d) => d.describe(),
        })
    }
    fn site(&self) -> SiteId {
        match self {
            DmaStep::Read(d) | DmaStep::Write(d) => d.site,
            DmaStep::RemoteRead(d) => d.site(),
            DmaStep::RemoteWrite(_) | DmaStep::RemoteLanding(_) => 0,
        }
    }
    fn bytes(&self) -> Option<i64> {
        self.is_pending().then(|| match self {
            DmaStep::Read(d) | DmaStep::Write(d) => d.plan.bytes,
            DmaStep::RemoteRead(d) => d.bytes(),
            DmaStep::RemoteWrite(d) => d.bytes(),
            DmaStep::RemoteLanding(d) => d.bytes(),
        })
    }
}

/// Deadlock reports say how many bytes the DMAs started on a semaphore delivered.
fn note_started(env: &DmaEnv, req: &DmaRequest, plan: &DmaRoute, bytes: i64) {
    env.sems.dma_started(req.dst_sem, plan.dst_gcore, bytes);
    if let Some(s) = req.src_sem {
        env.sems.dma_started(s, plan.src_gcore, bytes);
    }
}

/// A DMA starts on the timeline: its span is named after both sides.
fn trace_begin(env: &DmaEnv, r: &DmaRequest) -> Option<TraceDma> {
    let t = env.trace?;
    let dst_device = r.dst_device.unwrap_or(r.device);
    let dst_core = r.dst_core.unwrap_or(r.core);
    let side = |space: MemorySpace, id: u32, device: u32, core: u32, region: &Region| {
        let here = if device == r.device { String::new() } else { format!(" of device {device}") };
        let logical = BufferKey::for_access(space, id, device, core);
        let shape = env.memory.info(logical).map(|i| i.logical_shape).unwrap_or_default();
        format!("{} {id}{here}{}", space.name(), crate::memory::slice_notation(region, &shape))
    };
    let src = side(r.src_space, r.src_id, r.device, r.core, &r.src_region);
    let dst = side(r.dst_space, r.dst_id, dst_device, dst_core, &r.dst_region);
    let mut args = vec![
        ("src", TraceArg::Str(src.clone())),
        ("dst", TraceArg::Str(dst.clone())),
        ("dst_sem", TraceArg::Int(r.dst_sem as i64)),
    ];
    if let Some(s) = r.src_sem {
        args.push(("src_sem", TraceArg::Int(s as i64)));
    }
    Some(t.dma_begin(r.device, r.core, format!("{src} -> {dst}"), args))
}

/// Whether a copy to another core lands later (`landing`) rather than now:
/// always under "tpu"; under "eager" when its destination buffer does not
/// exist yet -- a sender running ahead of a device that has not reached
/// the kernel, which a TPU's memory allows (jax's barrier-semaphore test):
/// it lands at that core's next synchronisation point, where the buffer
/// exists.
fn lands_later(env: &DmaEnv, req: &DmaRequest, plan: &DmaRoute) -> bool {
    match env.mode {
        DmaMode::Tpu => true,
        DmaMode::Eager => !env.memory.exists(req.dst(plan).key()),
        DmaMode::OnWait => false,
    }
}

/// Starts `req` (eager: copies now; on_wait: queues its steps), through
/// `view` if given (see [`DmaView`]). Taken by value: a queued DMA keeps it
/// (no clone of its regions per DMA).
pub(crate) fn start(env: &DmaEnv, req: DmaRequest, view: Option<DmaView>) -> Result<()> {
    if req.src_sem.is_some() != req.dst_device.is_some() {
        return Err(RtError::value("Either both or neither `src_sem` and `device_id` can be set."));
    }
    env.sems.check_failed_at(req.device, req.core)?;
    let topo = env.topo;
    let src_gcore = topo.check(req.device, req.core)?;
    let dst_device = req.dst_device.unwrap_or(req.device);
    let dst_core = req.dst_core.unwrap_or(req.core);
    let dst_gcore = topo.check(dst_device, dst_core).map_err(|e| {
        RtError::value(format!("DMA destination (device {dst_device}, core {dst_core}) out of range: {}", e.message))
    })?;

    env.sems.check_exists(req.dst_sem)?;
    if let Some(s) = req.src_sem {
        env.sems.check_exists(s)?;
    }
    if let Some(link) = env.remote.filter(|l| l.is_remote(dst_device)) {
        let plan = DmaRoute { dst_device, dst_core, src_gcore, dst_gcore, bytes: 0 };
        return match env.mode {
            // Under "tpu" the owner's progress thread hands the write to
            // the destination core's inbox (`Runtime::apply`).
            DmaMode::Eager | DmaMode::Tpu => remote::start_eager(env, link, &req, &plan, view.is_some()),
            DmaMode::OnWait => remote::start_on_wait(env, link, req, plan, view.is_some()),
        };
    }
    if dst_gcore != src_gcore {
        let plan = DmaRoute { dst_device, dst_core, src_gcore, dst_gcore, bytes: 0 };
        if lands_later(env, &req, &plan) {
            return landing::start(env, req, view, plan);
        }
    }
    if env.mode != DmaMode::OnWait {
        // Nobody else can see this DMA: no state machine, and the copy
        // itself validates the two sides (this is the hot path).
        let plan = DmaRoute { dst_device, dst_core, src_gcore, dst_gcore, bytes: 0 };
        let race = env.races.map(|races| races.dma_begin(req.device, req.core));
        let bytes = copy_whole(env, &req, view.as_ref(), &plan, race, trace_begin(env, &req))?;
        note_started(env, &req, &plan, bytes);
        return Ok(());
    }

    // on_wait: validate now (exactly as the eager copy does: buffers,
    // regions, dtypes and shapes), so a bad DMA fails at its start, not at a
    // wait -- or never, if nobody waits. A destination on another device
    // that has not allocated it yet is checked when the write runs, as
    // stock checks every queued DMA.
    let plan = DmaRoute { dst_device, dst_core, src_gcore, dst_gcore, bytes: 0 };
    let bytes = landing::checked_bytes(env, &req, view.as_ref(), &plan)?;
    let bytes = i64::try_from(bytes).map_err(|_| RtError::value(format!("DMA of {bytes} bytes is too large")))?;

    let plan = DmaRoute { bytes, ..plan };
    let race = env.races.map(|races| races.dma_begin(req.device, req.core));
    let site = site::current();
    let trace = trace_begin(env, &req);
    let (src_sem, dst_sem) = (req.src_sem, req.dst_sem);
    // Counted until its source is read (an error on the way leaves it
    // counted: the device's borrowed inputs are then copied, not dropped).
    env.memory.dma_read_queued(req.device);
    let dma = Arc::new(QueuedDma { req, view, plan, machine: DmaMachine::new(), race, site, trace });
    if let Some(src_sem) = src_sem {
        env.sems.enqueue(src_sem, src_gcore, DmaStep::Read(Arc::clone(&dma)))?;
    }
    env.sems.enqueue(dst_sem, dst_gcore, DmaStep::Write(dma))?;
    // Counted once queued: a deadlock report may then say that every DMA it
    // counts on a semaphore nobody can run work for has delivered.
    env.sems.dma_started(dst_sem, dst_gcore, bytes);
    if let Some(s) = src_sem {
        env.sems.dma_started(s, src_gcore, bytes);
    }
    Ok(())
}
