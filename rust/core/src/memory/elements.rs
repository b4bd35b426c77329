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
    counts: Option<Dims<usize>>,
    at: Layout,
}

impl Touched {
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        if let Some(counts) = &self.counts {
            for_each_element(counts, &self.at, &self.at, |i, _| f(i));
        }
    }
}

impl MemoryTable {
    pub(crate) fn touched_elements(&self, key: BufferKey, region: &Region) -> Result<Touched> {
        let buf = self.get(key, "inspect")?;
        let plan = Plan::new(region, &buf.logical_shape)?;
        Ok(Touched {
            len: buf.shape.iter().product(),
            counts: plan.clip(&buf.shape),
            // Itemsize 1: the layout's offsets are element indices.
            at: plan.buffer_layout(&buf.shape, 1),
        })
    }
}
