//! Vector and scalar loads of VMEM / SMEM outside their buffer under
//! out-of-bounds reads "tpu": a TPU computes the address and loads whatever
//! lies there, with no bounds check (its DMA engine checks, its load units
//! do not). Kernels rely on it: tpu-inference's MLA kernel prefetches the
//! row after the last one on its loop's final trip and never uses it. Such
//! a load returns the fill value of uninitialized memory for the part
//! outside, and is reported once per source line as misuse -- never
//! silently, since a load whose value IS used is a bug on a TPU too.

use super::message::{shape_repr, Who};
use super::MemoryTable;
use crate::region::Region;
use crate::reports::{self, Category, Detail, Report};

impl MemoryTable {
    /// Reports a load of `region` by `who` that reached outside `shape`
    /// (the first at its source line only).
    pub(super) fn report_unchecked_load(&self, who: &Who, region: &Region, shape: &[usize], masked: bool) {
        let site = crate::site::current();
        if !self.note_oob_read(site) {
            return;
        }
        let at = crate::site::text(site).map(|t| format!(" at {t}")).unwrap_or_default();
        let what = if masked { "masked load" } else { "load" };
        reports::push(Report {
            category: Category::Misuse,
            text: format!(
                "{what} of {} buffer {who} reading [{}] outside its shape {}{at}: a TPU loads whatever lies \
                 there unchecked; the elements outside read as uninitialized memory \
                 (out_of_bounds_reads=\"raise\" makes this an error)",
                who.space.as_str().to_uppercase(),
                region.python_repr(),
                shape_repr(shape)
            ),
            details: vec![
                ("kind", Detail::from("load_out_of_bounds")),
                ("device", who.device.into()),
                ("core", who.core.into()),
                ("site", crate::site::text(site).into()),
            ],
            as_warning: self.report_as_warnings,
        });
    }
}
