//! Scalar reads of SMEM out of bounds, as a TPU does them: the scalar core
//! computes an address and loads the word there, with no bounds check (the
//! TPU checks DMAs, not scalar loads). Kernels rely on it: tpu-inference's
//! fused MoE reads `sizes[e - 2]` for e = 0 and discards the value with a
//! select. Such a read returns the fill value of uninitialized memory (the
//! TPU's word is some other variable's) and is reported once per source
//! line as misuse, instead of failing as stock's bounds check does.

use super::buffer::Buffer;
use super::message::{shape_repr, Who};
use super::{MemRef, MemorySpace, MemoryTable};

/// Whether `r` reads one element of SMEM (every listed dim an integer
/// index) -- cheap: no buffer lookup.
pub(super) fn is_scalar_smem(r: &MemRef<'_>) -> bool {
    r.space == MemorySpace::Smem && r.region.dims.iter().all(|d| d.squeezed)
}

/// Whether `r` (a scalar read, `is_scalar_smem`) has a negative index: such
/// a region fails validation, so it is told apart before `resolve`.
pub(super) fn has_negative_index(r: &MemRef<'_>) -> bool {
    r.region.dims.iter().any(|d| d.start < 0)
}

impl MemoryTable {
    /// Reads scalar `r` of `buf`, outside its shape, as the TPU does (see
    /// the module doc); false (nothing read) if `r` does not name every
    /// dim of `buf` with an index outside it.
    pub(super) fn read_outside_smem(&self, r: MemRef<'_>, buf: &Buffer, out: &mut [u8]) -> bool {
        if r.region.dims.len() != buf.shape.len() || out.len() != buf.dtype.itemsize() {
            return false;
        }
        let outside = r.region.dims.iter().zip(&buf.shape).any(|(d, &n)| d.start < 0 || d.start as u64 >= n as u64);
        if !outside {
            return false;
        }
        out.copy_from_slice(&self.fill.bytes_of(buf.dtype));
        let who = Who { device: r.device, core: r.core, space: r.space, id: r.id };
        let index: Vec<String> = r.region.dims.iter().map(|d| d.start.to_string()).collect();
        self.report_oob_read(&who, "smem_read_out_of_bounds", |at| {
            format!(
                "scalar read of SMEM buffer {who} at index ({}) outside its shape {}{at}: a TPU reads \
                 whatever word lies there unchecked; this read returned the uninitialized-memory value",
                index.join(", "),
                shape_repr(&buf.shape)
            )
        });
        true
    }
}
