//! Semaphores: lock-free counters, parking waits, the device barrier and the
//! kernel's failure state.
//!
//! OWNER: semaphore/DMA helper.

use crate::config::{Config, Topology};
use crate::error::{Result, RtError};
use crate::runtime::Runtime;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemKind {
    Regular,
    /// Counts bytes.
    Dma,
    Barrier,
}

/// A semaphore left with a non-zero count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leak {
    pub sem: u32,
    pub kind: SemKind,
    pub device: u32,
    pub core: u32,
    pub count: i64,
}

pub struct SemTable {
    // TODO(semaphore helper)
}

#[allow(unused_variables, clippy::too_many_arguments)]
impl SemTable {
    pub fn new(config: &Config) -> Self {
        todo!()
    }
    pub fn allocate(&self, topo: &Topology, device: u32, core: Option<u32>, kind: SemKind, count: u32) -> Result<u32> {
        todo!()
    }
    pub fn barrier_semaphore(&self, collective_id: u32) -> Result<u32> {
        todo!()
    }
    pub fn signal(
        &self,
        topo: &Topology,
        device: u32,
        core: u32,
        sem: u32,
        inc: i64,
        target_device: Option<u32>,
        target_core: Option<u32>,
    ) -> Result<()> {
        todo!()
    }
    /// Takes the runtime so a waiter can run queued DMAs (which touch memory).
    pub fn wait(&self, rt: &Runtime, device: u32, core: u32, sem: u32, value: i64) -> Result<()> {
        todo!()
    }
    pub fn read(&self, topo: &Topology, device: u32, core: u32, sem: u32) -> Result<i64> {
        todo!()
    }
    pub fn device_barrier(&self, rt: &Runtime, device: u32) -> Result<()> {
        todo!()
    }
    pub fn leaks(&self, topo: &Topology, device: Option<u32>) -> Vec<Leak> {
        todo!()
    }
    pub fn fail(&self, err: RtError) -> RtError {
        todo!()
    }
    pub fn failure(&self) -> Option<RtError> {
        todo!()
    }
}
