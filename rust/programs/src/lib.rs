//! mosaic_rt_programs: the pure computations a kernel's native ops run,
//! fenced off from the runtime. Scalar programs ([`scalar`]: a kernel's
//! rank-0 integer/bool index math), vector programs ([`vector`]: a block's
//! elementwise compute), their shared word decoding and decode cache
//! (`program_words`) and the Threefry-2x32 hash ([`threefry`]), each
//! bit-identical to what XLA:CPU would compute; and [`wire_enum!`], the
//! macro of every enum that crosses a boundary as an integer code.
//!
//! May use: std only. No runtime (`mosaic_rt_core` depends on this crate,
//! never the reverse), no pyo3, no XLA: the FFI handlers feed these
//! evaluators their operands and convert [`ProgramError`] into the
//! runtime's error at the boundary.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod error;
mod program_words;
pub mod scalar;
pub mod threefry;
pub mod vector;
#[doc(hidden)]
pub mod wire;

pub use error::{ProgramError, ProgramErrorKind, ProgramResult};
