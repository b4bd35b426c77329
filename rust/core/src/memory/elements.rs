//! Which elements of a buffer an access touches, for the race detector:
//! the region clipped to the ALLOCATED shape (what a read can see and where
//! a write may land), as flat C-order element indices.

use super::copy::{for_each_element, Layout};
use super::dims::Dims;
use super::plan::Plan;
use super::{BufferKey, MemoryTable};
use crate::error::Result;
use crate::region::Region;

pub(crate) struct Touched {
    /// Elements of the buffer (allocated shape).
    pub len: usize,
    /// Elements in a row (the innermost allocated dim; 1 for scalars).
    pub row: usize,
    counts: Option<Dims<usize>>,
    at: Layout,
}

impl Touched {
    /// Calls `f(start, len)` for each run of consecutive touched elements
    /// (the innermost dim when it is contiguous, else single elements).
    pub fn for_each_run(&self, mut f: impl FnMut(usize, usize)) {
        let Some(counts) = &self.counts else { return };
        match counts.len() {
            0 => f(self.at.offset, 1),
            n if self.at.strides[n - 1] == 1 => {
                let run = counts[n - 1];
                if run > 0 {
                    for_each_element(&counts[..n - 1], &self.at, &self.at, |i, _| f(i, run));
                }
            }
            _ => for_each_element(counts, &self.at, &self.at, |i, _| f(i, 1)),
        }
    }
}

impl MemoryTable {
    pub(crate) fn touched_elements(&self, key: BufferKey, region: &Region) -> Result<Touched> {
        let buf = self.get(key, "inspect")?;
        let plan = Plan::new(region, &buf.logical_shape)?;
        Ok(Touched {
            len: buf.shape.iter().product(),
            row: buf.shape.last().copied().unwrap_or(1),
            counts: plan.clip(&buf.shape),
            // Itemsize 1: the layout's offsets are element indices.
            at: plan.buffer_layout(&buf.shape, 1),
        })
    }
}
