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
        let what = if masked { "masked load" } else { "load" };
        self.report_oob_read(who, "load_out_of_bounds", |at| {
            format!(
                "{what} of {} buffer {who} reading [{}] outside its shape {}{at}: a TPU loads whatever lies \
                 there unchecked; the elements outside read as uninitialized memory \
                 (out_of_bounds_reads=\"raise\" makes this an error)",
                who.space.name().to_uppercase(),
                region.python_repr(),
                shape_repr(shape)
            )
        });
    }

    /// The one misuse report of every unchecked out-of-bounds read (vector
    /// loads here, SMEM scalar reads in `smem_scalar`): pushed for the first
    /// such read at the current source line only. `text` gets " at SITE"
    /// (or "" where the site is unknown) to place in its sentence.
    pub(super) fn report_oob_read(&self, who: &Who, kind: &'static str, text: impl FnOnce(&str) -> String) {
        let site = crate::site::current();
        if !self.note_oob_read(site) {
            return;
        }
        let at = crate::site::text(site).map(|t| format!(" at {t}")).unwrap_or_default();
        reports::push(Report {
            category: Category::Misuse,
            text: text(&at),
            details: vec![
                ("kind", Detail::from(kind)),
                ("device", who.device.into()),
                ("core", who.core.into()),
                ("site", crate::site::text(site).into()),
            ],
            as_warning: self.report_as_warnings,
        });
    }
}
