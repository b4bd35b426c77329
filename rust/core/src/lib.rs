//! mosaic_rt_core: the pure-Rust runtime behind mosaic_rt.
//!
//! One [`Runtime`] simulates one running Pallas TPU kernel on
//! `num_devices x cores_per_device` cores: semaphore counters (one atomic per
//! semaphore and global core), the DMA engine and simulated memory. There is
//! no process-global state; any number of runtimes may live at once.
//!
//! Nothing here knows about Python or XLA: the FFI crate and the pyo3 binding
//! are thin layers on top of [`Runtime`].
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod enum_str;
pub mod config;
pub mod deadlock;
pub mod dma;
pub mod dtype;
pub mod error;
pub mod memory;
pub mod prng;
pub mod races;
pub mod region;
pub mod reports;
pub mod registry;
pub mod revisit;
pub mod runtime;
pub mod sem;
pub mod site;
pub mod sync;
pub mod trace;

pub use config::{timeout_from_secs, Config, DmaMode, FillMode, LeakPolicy, OobReads, RacePolicy, Topology};
pub use dma::DmaRequest;
pub use dtype::DType;
pub use error::{ErrorKind, Result, RtError};
pub use memory::{Access, BufferInfo, BufferKey, Init, MemRef, MemorySpace};
pub use region::{DimSel, Region};
pub use registry::LaunchRegistry;
pub use runtime::Runtime;
pub use sem::{Leak, SemKind, MAX_COUNT};
pub use sync::IgnorePoison;
