//! The runtime's side of a launch spanning processes (see `crate::remote`):
//! what it sends, and how it applies what other processes send.

use super::Runtime;
use crate::config::DmaMode;
use crate::dma::remote::{write_destination, IncomingDma, Landing};
use crate::dma::DmaStep;
use crate::error::{ErrorKind, Result, RtError};
use crate::memory::{BufferKey, MemRef};
use crate::remote::detect::{Verdict, WaveContext};
use crate::remote::wire::{DstSide, Envelope, Msg, RaceSync, Status};
use crate::remote::{lock, Link};
use std::sync::Arc;
use std::time::Instant;

impl Runtime {
    /// A signal to a core of another process.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn signal_remote(
        &self,
        link: &Link,
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
            ))
            .at(device, core));
        }
        self.check_failed_at(device, core)?;
        self.topo.check(device, core)?;
        self.sems.check_exists(sem).map_err(|e| e.at(device, core))?;
        let target = target_device.unwrap_or(device);
        let gcore = self.topo.check(target, target_core.unwrap_or(0)).map_err(|e| e.at(device, core))?;
        let sync = self.races.as_ref().map(|r| RaceSync {
            clock: r.core_clock(self.topo.global_core(device, core)),
            device,
            core,
            site: String::new(),
        });
        link.send(link.owner(target), Msg::Signal { gcore, sem, inc, sync }).map_err(|e| e.at(device, core))
    }

    /// The last local device arrived at the device barrier: tell the others.
    pub(super) fn barrier_arrived_here(&self, generation: u64, count: u32) {
        if let Some(link) = self.link() {
            let clock = self.races.as_ref().map(|r| r.cores_joined()).unwrap_or_default();
            if let Err(e) = link.broadcast(&Msg::Barrier { generation, count, clock }) {
                self.fail(e);
            }
        }
    }

    /// A failure recorded here: every other process of the launch fails too.
    pub(super) fn tell_failure(&self, root: &RtError) {
        let Some(link) = self.link() else { return };
        let root = root.root_cause();
        // A Python exception cannot cross: the others get its text.
        let (kind, message) = match root.kind {
            ErrorKind::External => {
                let name = root.external.as_ref().map(|e| e.1.clone()).unwrap_or_else(|| "Exception".into());
                (ErrorKind::Runtime, format!("process {}: {name}: {}", link.process(), root.message))
            }
            k => (k, root.message.clone()),
        };
        let _ = link.broadcast(&Msg::Fail { kind, message, device: root.device, core: root.core });
    }

    /// Applies a message from another process (on the progress thread, in
    /// arrival order). An error fails the launch everywhere.
    pub fn deliver(&self, frame: Envelope) {
        let Some(link) = self.link() else { return };
        link.note_received(&frame.msg);
        if let Err(e) = self.apply(link, frame) {
            self.fail(e);
        }
    }

    /// An eager DMA whose `len` bytes are still in flight (`receive` takes
    /// them): written straight into its destination when that can be done
    /// now -- the destination is allocated here and no race detection
    /// runs -- and true; else false, and nothing was received.
    pub fn deliver_in_place(
        &self,
        frame: &Envelope,
        len: usize,
        receive: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> bool {
        let Some(link) = self.link() else { return false };
        let Msg::DmaEager { dst, sync, .. } = &frame.msg else { return false };
        // Under "tpu" the bytes land at the destination core's next
        // synchronisation point, not when they arrive (`apply`).
        if self.config.dma_mode == DmaMode::Tpu || self.races.is_some() || sync.is_some() || !self.can_land(dst) {
            return false;
        }
        link.note_received(&frame.msg);
        let mut received = false;
        let mut landed = self.land_in_place(dst, len, &mut |into: &mut [u8]| {
            received = true;
            receive(into)
        });
        if !received {
            // Failed before the data was taken: take it anyway, so the next
            // header from that process finds its own data.
            let mut sink = vec![0u8; len];
            landed = landed.and(receive(&mut sink));
        }
        if let Err(e) = landed {
            self.fail(e);
        }
        true
    }

    fn land_in_place(&self, dst: &DstSide, len: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<()>) -> Result<()> {
        let gcore = self.topo.check(dst.device, dst.core)?;
        self.sems.dma_started(dst.sem, gcore, len as i64);
        let m = MemRef::new(dst.device, dst.core, dst.space, dst.id, &dst.region);
        self.memory.store_from(m, len, fill).map_err(|e| e.at(dst.device, dst.core))?;
        self.sems.signal_global(gcore, dst.sem, len as i64)
    }

    fn apply(&self, link: &Link, frame: Envelope) -> Result<()> {
        let from = frame.from;
        match &frame.msg {
            Msg::Signal { sem, .. } | Msg::DmaQueued { dst: DstSide { sem, .. }, .. } if !self.sems.exists(*sem) => {
                self.hold(link, frame)
            }
            Msg::DmaEager { dst, .. } if !self.can_land(dst) => self.hold(link, frame),
            Msg::Signal { gcore, sem, inc, sync } => {
                if let (Some(races), Some(s)) = (&self.races, sync) {
                    races.remote_release(&s.clock, *sem, *gcore);
                }
                self.sems.signal_global(*gcore, *sem, *inc)
            }
            Msg::DmaEager { dst, sync, data } => {
                let gcore = self.topo.check(dst.device, dst.core)?;
                self.sems.dma_started(dst.sem, gcore, data.len() as i64);
                if self.config.dma_mode != DmaMode::Tpu {
                    return write_destination(&self.dma_env(), dst, gcore, data, sync.as_ref());
                }
                let Msg::DmaEager { dst, sync, data } = frame.msg else { unreachable!() };
                let landing = DmaStep::RemoteLanding(Box::new(Landing { dst, gcore, data, sync }));
                match self.sems.send_to_core(gcore, landing) {
                    Some(step) => step.run(&self.dma_env()), // the destination's program has ended
                    None => Ok(()),
                }
            }
            Msg::DmaQueued { id, dst, bytes, describe, sync } => {
                let gcore = self.topo.check(dst.device, dst.core)?;
                let (dst, describe, sync) = (dst.clone(), describe.clone(), sync.clone());
                let dma = Arc::new(IncomingDma::new(from, *id, dst.clone(), gcore, *bytes, describe, sync));
                link.register_incoming(from, *id, Arc::clone(&dma));
                self.sems.enqueue(dst.sem, gcore, DmaStep::RemoteWrite(dma))?;
                self.sems.dma_started(dst.sem, gcore, *bytes);
                Ok(())
            }
            Msg::DmaRead { id } => match link.take_outgoing(*id) {
                Some(dma) => dma.read_once(&self.dma_env(), link),
                None => Ok(()), // read already (a waiter here got there first)
            },
            Msg::DmaData { id, .. } => {
                let Some(dma) = link.take_incoming(from, *id) else {
                    return Err(RtError::internal(format!("data of unknown DMA {id} from process {from}")));
                };
                let Msg::DmaData { data, .. } = frame.msg else { unreachable!() };
                dma.arrived(&self.dma_env(), data)
            }
            Msg::Barrier { generation, count, clock } => {
                // The other process's past, seen once the barrier completes
                // here (joined now: this can only hide races, never invent one).
                if let Some(races) = self.races.as_ref().filter(|_| !clock.is_empty()) {
                    races.join_all(clock);
                }
                let sync = || {
                    if let Some(races) = &self.races {
                        races.sync_all();
                    }
                };
                self.sems.device_barrier_remote(*generation, *count, &sync);
                Ok(())
            }
            Msg::Fail { kind, message, device, core } => {
                let mut e = RtError::new(*kind, format!("{message} (in process {from})"));
                e.device = *device;
                e.core = *core;
                self.sems.fail(e);
                Ok(())
            }
            Msg::Left => Ok(()), // the registry's business
            Msg::Probe { wave } => link.send(from, Msg::Status { wave: *wave, status: self.local_status(link) }),
            Msg::Status { wave, status } => {
                let ctx = self.wave_context(Instant::now());
                let verdict = lock(&link.waves).answer(*wave, from, status.clone(), link.peers(), &ctx);
                if let Verdict::Deadlock(text) = verdict {
                    self.fail(RtError::new(ErrorKind::Deadlock, text));
                }
                Ok(())
            }
        }
    }

    /// Whether an eager DMA's destination exists here yet.
    fn can_land(&self, dst: &DstSide) -> bool {
        self.sems.exists(dst.sem)
            && self.memory.info(BufferKey::for_access(dst.space, dst.id, dst.device, dst.core)).is_ok()
    }

    /// Keeps `frame` until an allocation here makes it applicable.
    fn hold(&self, link: &Link, frame: Envelope) -> Result<()> {
        link.hold(frame);
        // An allocation may have happened since the check: try once more.
        self.retry_held();
        Ok(())
    }

    /// Applies the held messages that have become applicable.
    pub(super) fn retry_held(&self) {
        let Some(link) = self.link() else { return };
        if link.held_count() == 0 {
            return;
        }
        for frame in link.take_held() {
            let applicable = match &frame.msg {
                Msg::Signal { sem, .. } | Msg::DmaQueued { dst: DstSide { sem, .. }, .. } => self.sems.exists(*sem),
                Msg::DmaEager { dst, .. } => self.can_land(dst),
                _ => true,
            };
            if !applicable {
                link.hold(frame);
                continue;
            }
            if let Err(e) = self.apply(link, frame) {
                self.fail(e);
            }
        }
    }

    /// This process's status for a termination probe.
    fn local_status(&self, link: &Link) -> Status {
        let (quiet, epoch) = self.sems.quiescence();
        let (sent, received, link_epoch) = link.counts();
        let left = quiet.as_ref().is_some_and(|b| b.is_empty());
        let mut blocked = quiet.clone().unwrap_or_default();
        let held = link.held_count();
        if held > 0 && !blocked.is_empty() {
            blocked.push(format!(
                "  ({held} message(s) from other processes wait for a semaphore or buffer never allocated here)"
            ));
        }
        Status {
            joined: true,
            quiescent: quiet.is_some(),
            left,
            sent,
            received,
            epoch: epoch.wrapping_add(link_epoch << 32),
            blocked,
        }
    }

    fn wave_context(&self, now: Instant) -> WaveContext {
        let owners = self.link().map(|l| (0..self.topo.num_devices).map(|d| l.owner(d)).collect()).unwrap_or_default();
        WaveContext {
            num_devices: self.topo.num_devices,
            cores_per_device: self.topo.cores_per_device,
            owners,
            idle: self.config.deadlock_idle.unwrap_or(crate::DEFAULT_DEADLOCK_IDLE),
            now,
        }
    }

    /// The detector's periodic look: when every local core is stuck, ask
    /// the other processes (a wave of `remote::detect`). Not under loom,
    /// which models no detector thread.
    #[cfg(not(loom))]
    pub(super) fn remote_tick(&self, now: Instant) {
        let Some(link) = self.link() else { return };
        if !self.config.detect_deadlocks || self.sems.failure().is_some() {
            return;
        }
        let status = self.local_status(link);
        if !status.quiescent {
            lock(&link.waves).reset();
            return;
        }
        let wave = lock(&link.waves).start(link.process(), status, now);
        if let Some(wave) = wave {
            if let Err(e) = link.broadcast(&Msg::Probe { wave }) {
                self.fail(e);
            }
        }
    }
}
