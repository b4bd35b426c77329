//! Straight-line elementwise programs over arrays of n elements ("vector
//! programs"), evaluated natively so that a kernel block's elementwise
//! compute (`x + y`, `x * 2 + 1`, masks and selects) never becomes an XLA
//! fusion: XLA:CPU runs LLVM codegen for every fusion, and next to nothing to
//! compile a custom call (benches/PERFORMANCE.md, "Native compute instead of
//! XLA fusions").
//!
//! Results must be bit-identical to XLA:CPU's: integers and bools use the
//! scalar programs' ops (`crate::scalar`), floats XLA:CPU's IEEE semantics
//! with subnormals flushed on input and output (see `elem`), and the
//! rewrites XLA applies to float ops with constant operands (`simplify`).
//! Each instruction is one loop over a chunk of its elements (`kernels`),
//! chunk after chunk so that values stay in cache (`eval`).
//!
//! May use: `crate::scalar` (its integer ops and types),
//! `crate::program_words`, `crate::error`, `crate::wire`.

mod elem;
mod eval;
mod kernels;
mod meta;
mod ops;
mod plan;
mod program;
mod scratch;
mod simplify;
mod types;
mod view;

pub use kernels::FmaForm;
pub use ops::VectorOp;
pub use program::{
    VectorDecodeCache, VectorProgram, VectorProgramState, VectorPrograms, FORMAT, MAX_ELEMENTS, MAX_VALUES,
};
pub use scratch::VectorScratch;
pub use types::VectorType;

#[cfg(test)]
mod tests;
