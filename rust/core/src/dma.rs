//! The DMA engine: validation, byte counting, eager or on_wait execution.

mod machine;

pub use machine::DmaMachine;

use crate::config::DmaMode;
use crate::error::{Result, RtError};
use crate::memory::{Access, BufferKey, MemRef, MemorySpace};
use crate::races::DmaThread;
use crate::region::Region;
use crate::runtime::Runtime;
use crate::sem::Work;
use crate::site::{self, SiteId};
use crate::sync::Arc;
use crate::trace::{self, TraceDma};

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

/// Where a validated DMA goes and how many bytes it moves.
#[derive(Clone, Copy)]
struct Plan {
    dst_device: u32,
    dst_core: u32,
    src_gcore: u32,
    dst_gcore: u32,
    bytes: i64,
}

/// Read and write at once: a direct buffer-to-buffer copy (no intermediate
/// Vec), then the send (remote only) and receive signals.
/// The whole DMA at once (eager mode, or an on_wait DMA whose read has not
/// run yet). The copy itself checks dtypes and shapes; the semaphores count
/// the bytes it moved.
fn copy_whole(rt: &Runtime, r: &DmaRequest, plan: &Plan, race: Option<DmaThread>, tr: Option<TraceDma>) -> Result<i64> {
    let src =
        MemRef { device: r.device, core: r.core, space: r.src_space, id: r.src_id, region: &r.src_region };
    let dst = MemRef {
        device: plan.dst_device,
        core: plan.dst_core,
        space: r.dst_space,
        id: r.dst_id,
        region: &r.dst_region,
    };
    // Not `rt.copy`: the accesses are the DMA's, not the issuing core's.
    let bytes = rt.memory.copy(src, dst).map_err(|e| e.at(r.device, r.core))? as i64;
    let plan = &Plan { bytes, ..*plan };
    note_read(rt, r, race)?;
    note_write(rt, r, plan, race)?;
    if let Some(src_sem) = r.src_sem {
        note_signal(rt, race, src_sem, plan.src_gcore);
        trace::dma_signal(rt, tr, src_sem, plan.src_gcore);
        rt.sems.signal_global(plan.src_gcore, src_sem, plan.bytes)?;
    }
    note_signal(rt, race, r.dst_sem, plan.dst_gcore);
    note_end(rt, race);
    trace::dma_signal(rt, tr, r.dst_sem, plan.dst_gcore);
    trace::dma_end(rt, tr);
    rt.sems.signal_global(plan.dst_gcore, r.dst_sem, plan.bytes)?;
    Ok(plan.bytes)
}

// Race-detector hooks (`race` is Some exactly when detection is on).

fn note_read(rt: &Runtime, r: &DmaRequest, race: Option<DmaThread>) -> Result<()> {
    if let (Some(races), Some(t)) = (&rt.races, race) {
        let key = buffer_key(r.src_space, r.src_id, r.device, r.core);
        if let Some(e) = races.dma_access(&rt.memory, t, key, &r.src_region, false) {
            return Err(e);
        }
    }
    Ok(())
}

fn note_write(rt: &Runtime, r: &DmaRequest, plan: &Plan, race: Option<DmaThread>) -> Result<()> {
    if let (Some(races), Some(t)) = (&rt.races, race) {
        let key = buffer_key(r.dst_space, r.dst_id, plan.dst_device, plan.dst_core);
        if let Some(e) = races.dma_access(&rt.memory, t, key, &r.dst_region, true) {
            return Err(e);
        }
    }
    Ok(())
}

/// Before the signal itself, so a waiter that sees the count sees the clock.
fn note_signal(rt: &Runtime, race: Option<DmaThread>, sem: u32, gcore: u32) {
    if let (Some(races), Some(t)) = (&rt.races, race) {
        races.dma_signal(t, sem, gcore);
    }
}

fn note_end(rt: &Runtime, race: Option<DmaThread>) {
    if let (Some(races), Some(t)) = (&rt.races, race) {
        races.dma_end(t);
    }
}

/// A queued DMA, shared by the tasks that may run its steps.
struct QueuedDma {
    req: DmaRequest,
    plan: Plan,
    machine: DmaMachine<Vec<u8>>,
    race: Option<DmaThread>,
    /// Where it was started.
    site: SiteId,
    trace: Option<TraceDma>,
}

impl QueuedDma {
    /// Loads the source region, then signals the send semaphore (remote only).
    fn load_source(&self, rt: &Runtime) -> Result<Vec<u8>> {
        let (r, plan) = (&self.req, &self.plan);
        // Bounds first: a huge out-of-bounds region fails without allocating.
        let src = MemRef { device: r.device, core: r.core, space: r.src_space, id: r.src_id, region: &r.src_region };
        let n = rt.memory.check_access(src, Access::Read).map_err(|e| e.at(r.device, r.core))?;
        let mut data = crate::memory::zeroed(n, || format!("a DMA of {n} bytes"))?;
        // Not `rt.load`: the access is the DMA's, not the issuing core's.
        rt.memory
            .load(src, &mut data)
            .map_err(|e| e.at(r.device, r.core))?;
        note_read(rt, r, self.race)?;
        if let Some(src_sem) = r.src_sem {
            note_signal(rt, self.race, src_sem, plan.src_gcore);
            trace::dma_signal(rt, self.trace, src_sem, plan.src_gcore);
            rt.sems.signal_global(plan.src_gcore, src_sem, plan.bytes)?;
        }
        Ok(data)
    }

    /// Stores into the destination, then signals the receive semaphore.
    fn store_destination(&self, rt: &Runtime, data: &[u8]) -> Result<()> {
        let (r, plan) = (&self.req, &self.plan);
        let dst = MemRef::new(plan.dst_device, plan.dst_core, r.dst_space, r.dst_id, &r.dst_region);
        rt.memory
            .store(dst, data)
            .map_err(|e| e.at(plan.dst_device, plan.dst_core))?;
        note_write(rt, r, plan, self.race)?;
        note_signal(rt, self.race, r.dst_sem, plan.dst_gcore);
        note_end(rt, self.race);
        trace::dma_signal(rt, self.trace, r.dst_sem, plan.dst_gcore);
        trace::dma_end(rt, self.trace);
        rt.sems.signal_global(plan.dst_gcore, r.dst_sem, plan.bytes)
    }

    fn run_read(&self, rt: &Runtime) -> Result<()> {
        self.machine.read(|| self.load_source(rt))
    }

    fn run_read_write(&self, rt: &Runtime) -> Result<()> {
        self.machine.read_write(
            || copy_whole(rt, &self.req, &self.plan, self.race, self.trace).map(|_| ()),
            |data| self.store_destination(rt, data),
        )
    }

    /// For leak reports: names both buffers, both semaphores and the cores.
    fn describe(&self) -> String {
        let (r, plan) = (&self.req, &self.plan);
        let side = |space, id, device, core, region: &Region| {
            let key = buffer_key(space, id, device, core);
            if region.dims.is_empty() {
                format!("{key}")
            } else {
                format!("{key}{}", region.slice_repr())
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
            side(r.src_space, r.src_id, r.device, r.core, &r.src_region),
            side(r.dst_space, r.dst_id, plan.dst_device, plan.dst_core, &r.dst_region),
            r.device,
            r.core,
            site::at(self.site)
        )
    }
}

/// The send side of a queued remote DMA: its read step.
struct ReadStep(Arc<QueuedDma>);

impl Work for ReadStep {
    fn run(&self, rt: &Runtime) -> Result<()> {
        self.0.run_read(rt)
    }
    fn pending(&self) -> Option<String> {
        self.0.machine.is_started().then(|| self.0.describe())
    }
    fn site(&self) -> SiteId {
        self.0.site
    }
    fn bytes(&self) -> Option<i64> {
        self.0.machine.is_started().then_some(self.0.plan.bytes)
    }
}

/// The receive side of a queued DMA: whatever is left of it.
struct WriteStep(Arc<QueuedDma>);

impl Work for WriteStep {
    fn run(&self, rt: &Runtime) -> Result<()> {
        self.0.run_read_write(rt)
    }
    fn pending(&self) -> Option<String> {
        (!self.0.machine.is_completed()).then(|| self.0.describe())
    }
    fn site(&self) -> SiteId {
        self.0.site
    }
    fn bytes(&self) -> Option<i64> {
        (!self.0.machine.is_completed()).then_some(self.0.plan.bytes)
    }
}

/// Deadlock reports say how many bytes the DMAs started on a semaphore deliver.
fn note_started(rt: &Runtime, req: &DmaRequest, plan: &Plan, bytes: i64) {
    if rt.sems.monitor.enabled() {
        rt.sems.dma_started(req.dst_sem, plan.dst_gcore, bytes);
        if let Some(s) = req.src_sem {
            rt.sems.dma_started(s, plan.src_gcore, bytes);
        }
    }
}

fn buffer_key(space: MemorySpace, id: u32, device: u32, core: u32) -> BufferKey {
    let core = if space.is_shared_by_cores() { 0 } else { core };
    BufferKey { space, id, device, core }
}

/// Starts `req` on `rt` (eager: copies now; on_wait: queues the work).
pub fn start(rt: &Runtime, req: &DmaRequest) -> Result<()> {
    if req.src_sem.is_some() != req.dst_device.is_some() {
        return Err(RtError::value("Either both or neither `src_sem` and `device_id` can be set."));
    }
    rt.check_failed_at(req.device, req.core)?;
    let topo = rt.topology();
    let src_gcore = topo.check(req.device, req.core)?;
    let dst_device = req.dst_device.unwrap_or(req.device);
    let dst_core = req.dst_core.unwrap_or(req.core);
    let dst_gcore = topo.check(dst_device, dst_core).map_err(|e| {
        RtError::value(format!(
            "DMA destination (device {dst_device}, core {dst_core}) out of range: {}",
            e.message
        ))
    })?;

    rt.sems.check_exists(req.dst_sem)?;
    if let Some(s) = req.src_sem {
        rt.sems.check_exists(s)?;
    }
    if rt.config().dma_mode == DmaMode::Eager {
        // Nobody else can see this DMA: no state machine, and the copy
        // itself validates the two sides (this is the hot path).
        let plan = Plan { dst_device, dst_core, src_gcore, dst_gcore, bytes: 0 };
        let race = rt.races.as_ref().map(|races| races.dma_begin(req.device, req.core));
        let bytes = copy_whole(rt, req, &plan, race, trace::dma_begin(rt, req))?;
        note_started(rt, req, &plan, bytes);
        return Ok(());
    }

    // on_wait: validate now (exactly as the eager copy does: buffers,
    // regions, dtypes and shapes), so a bad DMA fails at its start, not at a
    // wait -- or never, if nobody waits.
    let src = MemRef { device: req.device, core: req.core, space: req.src_space, id: req.src_id, region: &req.src_region };
    let dst = MemRef { device: dst_device, core: dst_core, space: req.dst_space, id: req.dst_id, region: &req.dst_region };
    let bytes = rt.memory.check_copy(src, dst)?;
    let bytes = i64::try_from(bytes).map_err(|_| RtError::value(format!("DMA of {bytes} bytes is too large")))?;

    let plan = Plan { dst_device, dst_core, src_gcore, dst_gcore, bytes };
    let race = rt.races.as_ref().map(|races| races.dma_begin(req.device, req.core));
    note_started(rt, req, &plan, bytes);
    let site = site::current();
    let trace = trace::dma_begin(rt, req);
    let dma = Arc::new(QueuedDma { req: req.clone(), plan, machine: DmaMachine::new(), race, site, trace });
    if let Some(src_sem) = req.src_sem {
        rt.sems.enqueue(src_sem, src_gcore, Box::new(ReadStep(Arc::clone(&dma))))?;
    }
    rt.sems.enqueue(req.dst_sem, dst_gcore, Box::new(WriteStep(dma)))
}
