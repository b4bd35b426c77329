//! Scalar reads of SMEM out of bounds, as a TPU does them: the scalar core
//! computes an address and loads the word there, with no bounds check (the
//! TPU checks DMAs, not scalar loads). Kernels rely on it: tpu-inference's
//! fused MoE reads `sizes[e - 2]` for e = 0 and discards the value with a
//! select. Such a read returns the fill value of uninitialized memory (the
//! TPU's word is some other variable's) and is reported once per source
//! line as misuse, instead of failing as stock's bounds check does.

use super::message::{shape_repr, Who};
use super::{MemRef, MemorySpace, MemoryTable};
use crate::error::Result;
use crate::reports::{self, Category, Detail, Report};

impl MemoryTable {
    /// Reads `r` into `out` if it is a scalar read of SMEM outside the
    /// buffer (true), else leaves `out` alone (false).
    pub(super) fn unchecked_smem_scalar(&self, r: MemRef<'_>, out: &mut [u8]) -> Result<bool> {
        if r.space != MemorySpace::Smem || !r.region.dims.iter().all(|d| d.squeezed) {
            return Ok(false);
        }
        let buf = self.get(r.key(), "read")?;
        if r.region.dims.len() != buf.shape.len() || out.len() != buf.dtype.itemsize() {
            return Ok(false);
        }
        let outside = r.region.dims.iter().zip(&buf.shape).any(|(d, &n)| d.start < 0 || d.start as u64 >= n as u64);
        if !outside {
            return Ok(false);
        }
        out.copy_from_slice(&buf.dtype.fill_bytes(self.fill));
        let site = crate::site::current();
        if self.note_smem_oob(site) {
            let who = Who { device: r.device, core: r.core, space: r.space, id: r.id };
            let index: Vec<String> = r.region.dims.iter().map(|d| d.start.to_string()).collect();
            let at = crate::site::text(site).map(|t| format!(" at {t}")).unwrap_or_default();
            reports::push(Report {
                category: Category::Misuse,
                text: format!(
                    "scalar read of SMEM buffer {who} at index ({}) outside its shape {}{at}: a TPU reads \
                     whatever word lies there unchecked; this read returned the uninitialized-memory value",
                    index.join(", "),
                    shape_repr(&buf.shape)
                ),
                details: vec![
                    ("kind", Detail::from("smem_read_out_of_bounds")),
                    ("device", r.device.into()),
                    ("core", r.core.into()),
                    ("site", crate::site::text(site).into()),
                ],
                as_warning: self.report_as_warnings,
            });
        }
        Ok(true)
    }
}
