//! DMAs whose destination is a device of another process (see
//! `crate::remote` for the protocol). The source side runs here, the
//! destination side in the owner's runtime, from the messages.

use super::{note_end, note_read, note_signal, note_started, DmaEnv, DmaRequest, DmaRoute, DmaStep};
use crate::error::{Result, RtError};
use crate::memory::{Access, MemRef};
use crate::races::DmaThread;
use crate::remote::wire::RaceSync;
use crate::remote::wire::{DstSide, Msg};
use crate::remote::{lock, Link, Payload};
use crate::site::{self, SiteId};
use std::sync::{Arc, Mutex};

fn dst_side(req: &DmaRequest, plan: &DmaRoute) -> DstSide {
    DstSide {
        device: plan.dst_device,
        core: plan.dst_core,
        space: req.dst_space,
        id: req.dst_id,
        region: req.dst_region.clone(),
        sem: req.dst_sem,
    }
}

/// Reads the source region of `req` (checked as a load), then signals its
/// send semaphore with the bytes read.
fn read_source(env: &DmaEnv, req: &DmaRequest, race: Option<DmaThread>) -> Result<Payload> {
    let n = env.memory.check_access(req.src(), Access::Read).map_err(|e| e.at(req.device, req.core))?;
    // Read straight into the frame's buffer (its header goes in front).
    let mut data = Payload::with_headroom(n);
    if n > 0 {
        env.memory.load(req.src(), data.as_mut_slice()).map_err(|e| e.at(req.device, req.core))?;
    }
    note_read(env, req, race)?;
    if let Some(src_sem) = req.src_sem {
        let src_gcore = env.topo.global_core(req.device, req.core);
        note_signal(env, race, src_sem, src_gcore);
        env.sems.signal_global(src_gcore, src_sem, data.len() as i64)?;
    }
    Ok(data)
}

/// What travels with a DMA for race detection: its clock, issuer and site.
fn race_sync(env: &DmaEnv, req: &DmaRequest, race: Option<DmaThread>, site: SiteId) -> Option<RaceSync> {
    let (races, t) = (env.races?, race?);
    Some(RaceSync {
        clock: races.dma_clock(t),
        device: req.device,
        core: req.core,
        site: site::text(site).unwrap_or_default(),
    })
}

fn remote_only(view: bool) -> Result<()> {
    if view {
        return Err(RtError::not_implemented(
            "a DMA to a device of another process through a ref view (bitcast, reshape) is not supported",
        ));
    }
    Ok(())
}

/// An eager DMA to another process: read now, send the bytes.
pub(super) fn start_eager(env: &DmaEnv, link: &Link, req: &DmaRequest, plan: &DmaRoute, view: bool) -> Result<()> {
    remote_only(view)?;
    let race = env.races.map(|r| r.dma_begin(req.device, req.core));
    let data = read_source(env, req, race)?;
    let sync = race_sync(env, req, race, site::current());
    note_end(env, race);
    let bytes = data.len() as i64;
    note_started(env, req, plan, bytes);
    link.send(link.owner(plan.dst_device), Msg::DmaEager { dst: dst_side(req, plan), sync, data })
}

/// The source side of an on_wait DMA to another process.
pub(crate) struct OutgoingDma {
    req: DmaRequest,
    plan: DmaRoute,
    id: u64,
    /// Read yet (the data went to the destination's process)?
    read: Mutex<bool>,
    site: SiteId,
    race: Option<DmaThread>,
}

impl OutgoingDma {
    /// Reads the source and sends the data, unless done already (a waiter
    /// here on the send semaphore, or the destination asking).
    pub(crate) fn read_once(&self, env: &DmaEnv, link: &Link) -> Result<()> {
        let mut read = lock(&self.read);
        if *read {
            return Ok(());
        }
        let data = read_source(env, &self.req, self.race)?;
        note_end(env, self.race);
        *read = true;
        env.memory.dma_read_done(self.req.device);
        link.send(link.owner(self.plan.dst_device), Msg::DmaData { id: self.id, data })
    }

    pub(crate) fn is_pending(&self) -> bool {
        !*lock(&self.read)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn site(&self) -> SiteId {
        self.site
    }

    pub(crate) fn bytes(&self) -> i64 {
        self.plan.bytes
    }

    pub(crate) fn describe(&self) -> String {
        let r = &self.req;
        format!(
            "DMA of {} bytes from {} to device {} (another process), started on device {}, core {}{}",
            self.plan.bytes,
            MemRef::new(r.device, r.core, r.src_space, r.src_id, &r.src_region).key(),
            self.plan.dst_device,
            r.device,
            r.core,
            site::at(self.site)
        )
    }
}

/// An on_wait DMA to another process: validate the source, queue the read
/// here on the send semaphore, tell the destination's process.
pub(super) fn start_on_wait(env: &DmaEnv, link: &Link, req: DmaRequest, plan: DmaRoute, view: bool) -> Result<()> {
    remote_only(view)?;
    let bytes = env.memory.check_region_bytes(req.src())?;
    let bytes = i64::try_from(bytes).map_err(|_| RtError::value(format!("DMA of {bytes} bytes is too large")))?;
    let plan = DmaRoute { bytes, ..plan };
    let id = link.next_dma_id();
    let site = site::current();
    let dst = dst_side(&req, &plan);
    let describe = format!(
        "DMA of {bytes} bytes from device {}, core {} (process {}){}",
        req.device,
        req.core,
        link.process(),
        site::at(site)
    );
    env.memory.dma_read_queued(req.device);
    let race = env.races.map(|r| r.dma_begin(req.device, req.core));
    let sync = race_sync(env, &req, race, site);
    let src_sem = req.src_sem;
    let dma = Arc::new(OutgoingDma { req, plan, id, read: Mutex::new(false), site, race });
    link.register_outgoing(id, Arc::clone(&dma));
    if let Some(s) = src_sem {
        env.sems.enqueue(s, plan.src_gcore, DmaStep::RemoteRead(dma))?;
        env.sems.dma_started(s, plan.src_gcore, bytes);
    }
    link.send(link.owner(plan.dst_device), Msg::DmaQueued { id, dst, bytes, describe, sync })
}

/// Where an incoming on_wait DMA stands at its destination.
enum InState {
    /// Queued; nobody needed the data yet.
    Queued,
    /// A waiter here asked the source's process for the data.
    Requested,
    /// The data arrived before a waiter needed it.
    Data(Payload),
    Done,
}

/// The destination side of an on_wait DMA from another process, queued on
/// its receive semaphore here.
pub(crate) struct IncomingDma {
    from: u32,
    id: u64,
    dst: DstSide,
    gcore: u32,
    bytes: i64,
    describe: String,
    sync: Option<RaceSync>,
    state: Mutex<InState>,
}

impl IncomingDma {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        from: u32,
        id: u64,
        dst: DstSide,
        gcore: u32,
        bytes: i64,
        describe: String,
        sync: Option<RaceSync>,
    ) -> IncomingDma {
        IncomingDma { from, id, dst, gcore, bytes, describe, sync, state: Mutex::new(InState::Queued) }
    }

    /// A waiter here needs the data: write it if it came, else ask for it
    /// (the write then happens when it arrives, `arrived`).
    pub(crate) fn run(&self, env: &DmaEnv, link: &Link) -> Result<()> {
        let mut st = lock(&self.state);
        match std::mem::replace(&mut *st, InState::Done) {
            InState::Queued => {
                *st = InState::Requested;
                link.send(self.from, Msg::DmaRead { id: self.id })
            }
            InState::Data(data) => write_destination(env, &self.dst, self.gcore, &data, self.sync.as_ref()),
            other => {
                *st = other;
                Ok(())
            }
        }
    }

    /// The data arrived from the source's process.
    pub(crate) fn arrived(&self, env: &DmaEnv, data: Payload) -> Result<()> {
        let mut st = lock(&self.state);
        match std::mem::replace(&mut *st, InState::Done) {
            InState::Requested => write_destination(env, &self.dst, self.gcore, &data, self.sync.as_ref()),
            InState::Queued => {
                *st = InState::Data(data);
                Ok(())
            }
            other => {
                *st = other;
                Ok(())
            }
        }
    }

    pub(crate) fn is_pending(&self) -> bool {
        !matches!(*lock(&self.state), InState::Done)
    }

    pub(crate) fn bytes(&self) -> i64 {
        self.bytes
    }

    pub(crate) fn describe(&self) -> String {
        self.describe.clone()
    }
}

/// An eager DMA from another process under `dma_execution_mode="tpu"`:
/// its bytes arrived here and land at the destination core's next
/// synchronisation point, as a copy from a core of this process would
/// (`dma/landing.rs`).
pub(crate) struct Landing {
    pub dst: DstSide,
    pub gcore: u32,
    pub data: Payload,
    pub sync: Option<RaceSync>,
}

impl Landing {
    pub(crate) fn run(&self, env: &DmaEnv) -> Result<()> {
        write_destination(env, &self.dst, self.gcore, &self.data, self.sync.as_ref())
    }

    pub(crate) fn bytes(&self) -> i64 {
        self.data.len() as i64
    }

    pub(crate) fn describe(&self) -> String {
        let d = &self.dst;
        let key = MemRef::new(d.device, d.core, d.space, d.id, &d.region).key();
        let from =
            self.sync.as_ref().map(|s| format!(" from device {}, core {}", s.device, s.core)).unwrap_or_default();
        format!("DMA of {} bytes{from} (another process) to {key}, receive semaphore {}", self.bytes(), d.sem)
    }
}

/// Writes `data` into the destination `dst` (global core `gcore`), then
/// signals its receive semaphore with the bytes. With race detection the
/// write is a DMA thread's here, whose past is `sync`'s clock.
pub(crate) fn write_destination(
    env: &DmaEnv,
    dst: &DstSide,
    gcore: u32,
    data: &[u8],
    sync: Option<&RaceSync>,
) -> Result<()> {
    let m = MemRef::new(dst.device, dst.core, dst.space, dst.id, &dst.region);
    if !data.is_empty() {
        env.memory.store(m, data).map_err(|e| e.at(dst.device, dst.core))?;
    }
    if let (Some(races), Some(s)) = (env.races, sync) {
        let t = races.remote_dma_begin(&s.clock, s.device, s.core, site::intern(&s.site));
        if let Some(e) = races.dma_access(env.memory, t, m.key(), &dst.region, true) {
            return Err(e);
        }
        races.dma_signal(t, dst.sem, gcore);
        races.dma_end(t);
    }
    env.sems.signal_global(gcore, dst.sem, data.len() as i64)
}
