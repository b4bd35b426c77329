//! mosaic_rt_wire: what crosses a boundary by code or by name, stated once.
//!
//! [`wire_enum!`] declares every enum that crosses one (FFI attributes,
//! program words, tables exported to Python, configuration strings): each
//! variant's code and name in one line, so no layer re-lists or re-spells
//! them. [`DType`] is the one element-type table: its codes are the ones
//! simulated memory, the scalar and vector programs (whose types are parts
//! of this table, `wire_enum!`'s `in DType` form) and Python
//! (`_native.DTYPES`) all use.
//!
//! May use: std only. Every other crate may use this one.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

mod dtype;
mod error;
#[doc(hidden)]
pub mod wire_enum;

pub use dtype::DType;
pub use error::WireError;
