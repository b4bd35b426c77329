//! mosaic_rt_core: the pure-Rust runtime behind mosaic_rt.
//!
//! One [`Runtime`] simulates one running Pallas TPU kernel on
//! `num_devices x cores_per_device` cores: semaphore counters (one atomic per
//! semaphore and global core), the DMA engine and simulated memory. Any
//! number of runtimes may live at once; a launch's state lives in its
//! runtime. What is process-wide, and why:
//!
//! * [`reports`]: the queue of "warn" reports (races, leaks, misuse) that
//!   Python drains and issues as warnings;
//! * [`latest_race_log`]: the race log of the most recent runtime created
//!   with race detection (`mosaic_rt.races`);
//! * [`site`]: the resolver from site ids to kernel source lines, installed
//!   once by the FFI layer's interning table;
//! * the deadlock detector thread (one per process, started by the first
//!   launch that needs it), which watches live launches through weak
//!   references.
//!
//! The core links neither Python nor XLA: the FFI crate and the pyo3
//! binding are thin layers on top of [`Runtime`]. Of the crates below it,
//! it uses `mosaic_rt_wire` (`wire_enum!` for every enum that crosses a
//! boundary, the [`DType`] table) and `mosaic_rt_programs` (its error,
//! converted into [`RtError`], `error.rs`); neither knows the runtime. It does speak stock
//! interpret mode's language, because users and tests match on it: error
//! texts reproduce stock's messages character for character (including the
//! Python reprs of indices and shapes, see [`region::python_tuple`]), and
//! each [`ErrorKind`] names the exception class the layers above raise it as.
//!
//! Modules (runtime -> dma -> sem / memory / races / trace; nothing below
//! the runtime knows of it): `runtime` (the public contract), `dma` (the DMA
//! engine over a `DmaEnv`), `sem` (counters, waits, barrier, failure;
//! generic over the work queued on a semaphore), `memory`, `races`, `trace`,
//! `deadlock`, `registry` (the launches of a process), `grid` (a grid
//! loop's block bookkeeping), `config`, `error`, `remote` (launches
//! spanning processes: what crosses to the devices other processes own,
//! over a `remote::Transport` the layers above provide; no MPI here).
//!
//! May use: std, `mosaic_rt_wire`, `mosaic_rt_programs` (program errors); no pyo3, no XLA.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod config;
mod deadlock;
mod dma;
mod error;
pub mod grid;
mod hash;
pub mod memory;
mod prng;
mod races;
pub mod region;
mod registry;
pub mod remote;
pub mod reports;
mod revisit;
mod runtime;
mod sem;
pub mod site;
mod spin;
mod sync;
mod trace;

pub use config::{
    timeout_from_secs, Config, DmaMode, FillMode, LeakPolicy, OobReads, RacePolicy, Topology, DEFAULT_DEADLOCK_IDLE,
};
pub use deadlock::CoreState;
pub use dma::{DmaRequest, DmaView, UnitLayout, ViewEntries, ViewMap};
pub use error::{ErrorKind, Result, RtError};
pub use memory::{pooled_bytes, Access, BufferInfo, BufferKey, BufferSpec, Init, MemRef, MemorySpace, Stored};
pub use mosaic_rt_wire::DType;
pub use races::{latest_race_log, RaceLog};
pub use region::{DimSel, Region};
pub use registry::LaunchRegistry;
pub use runtime::{live_runtimes, Runtime};
pub use sem::{AdaptiveSpin, Leak, SemKind, MAX_COUNT};
pub use sync::IgnorePoison;
pub use trace::Tracer;

/// Internal types for this crate's own tests and loom models (the
/// `internals` feature, which only the crate's dev-dependency on itself
/// turns on). Not an API.
#[cfg(any(feature = "internals", loom))]
#[doc(hidden)]
pub mod internals {
    pub use crate::dma::DmaMachine;
    pub use crate::memory::table::MemoryTable;
    pub use crate::races::{Epoch, Memo, Shadow, VectorClock};
    pub use crate::registry::MAX_FAILED_INSTANCES;
    pub use crate::sem::{NoWork, Queued, SemTable, SemWait, WaitRecord};

    /// std's primitives, or loom's under `--cfg loom`.
    pub mod sync {
        pub use crate::sync::{Arc, AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Mutex, Ordering};
    }
}
