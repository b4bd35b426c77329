//! Straight-line programs over rank-0 integers and bools, evaluated natively
//! so that a kernel's index arithmetic (loop counters, `pl.when` predicates,
//! `(me + k) % n`, semaphore-array indexing) never becomes an XLA fusion:
//! XLA:CPU runs LLVM codegen for every fusion, even for one `s32[] add`, and
//! next to nothing to compile a custom call (benches/PERFORMANCE.md, "Native
//! compute instead of XLA fusions").
//!
//! Results must be bit-identical to XLA's, so every op implements XLA:CPU's
//! integer semantics (see `ops`). Floats are out of scope: XLA may contract
//! or reassociate them.
//!
//! May use: `crate::program_words`, `crate::error`, `crate::wire`.

mod ops;
mod program;
mod types;

pub use crate::program_words::fingerprint;
pub use ops::{binary, convert, unary, ScalarOp};
pub use program::{ScalarDecodeCache, ScalarProgram, ScalarProgramState, ScalarPrograms, Values, FORMAT, MAX_VALUES};
pub use types::ScalarType;
