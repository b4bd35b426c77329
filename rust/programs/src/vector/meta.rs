//! What decoding learnt of each value of a vector program, for the
//! simplifier (`simplify`) and the planner.
//!
//! May use: `ops`, `types`.

use super::ops::VectorOp;
use super::types::VectorType;

/// What decoding learnt of a value.
#[derive(Clone, Copy, Debug)]
pub(super) struct VectorValueMeta {
    pub ty: VectorType,
    /// One element, broadcast where an array meets it.
    pub scalar: bool,
    /// A constant's: the word of its immediate.
    pub const_at: Option<u32>,
    /// A `convert_element_type`'s: its argument.
    pub convert_of: Option<u8>,
    /// A float `gt` or `lt`'s: the op and its two arguments.
    pub compare_of: Option<(VectorOp, u8, u8)>,
}
