//! Which elements of a buffer an access touches, for the race detector:
//! the region clipped to the ALLOCATED shape (what a read can see and where
//! a write may land), as flat C-order element indices.

use super::copy::{for_each_element, StridedLayout};
use super::dims::Dims;
use super::plan::RegionPlan;
use super::{BufferKey, MemoryTable};
use crate::error::Result;
use crate::region::Region;

pub(crate) struct Touched {
    /// Elements of the buffer (allocated shape).
    pub len: usize,
    /// Elements in a row (the innermost allocated dim; 1 for scalars).
    pub row: usize,
    pub(crate) counts: Option<Dims<usize>>,
    pub(crate) at: StridedLayout,
}

impl Touched {
    /// Calls `f(start, len)` for each run of consecutive touched elements:
    /// the innermost dims merged while they continue one contiguous run (a
    /// whole contiguous block is one run), else single elements.
    pub fn for_each_run(&self, mut f: impl FnMut(usize, usize)) {
        let Some(counts) = &self.counts else { return };
        if counts.contains(&0) {
            return;
        }
        // Dims k.. form one run of `run` elements.
        let (mut k, mut run) = (counts.len(), 1);
        while k > 0 && (counts[k - 1] == 1 || self.at.strides[k - 1] == run) {
            run *= counts[k - 1];
            k -= 1;
        }
        if k == counts.len() {
            // Strided innermost dim: single elements.
            for_each_element(counts, &self.at, &self.at, |i, _| f(i, 1));
        } else {
            // Only the strides of dims ..k are used.
            for_each_element(&counts[..k], &self.at, &self.at, |i, _| f(i, run));
        }
    }
}

impl MemoryTable {
    pub(crate) fn touched_elements(&self, key: BufferKey, region: &Region) -> Result<Touched> {
        let buf = self.get(key, "inspect")?;
        let plan = RegionPlan::new(region, &buf.logical_shape)?;
        Ok(Touched {
            len: buf.shape.iter().product(),
            row: buf.shape.last().copied().unwrap_or(1),
            counts: plan.clip(&buf.shape),
            // Itemsize 1: the layout's offsets are element indices.
            at: plan.buffer_layout(&buf.shape, 1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(values: &[usize]) -> Dims<usize> {
        let mut d = Dims::new();
        for &v in values {
            d.push(v);
        }
        d
    }

    /// The runs, expanded, against one call per element.
    fn check(counts: &[usize], offset: usize, strides: &[usize]) {
        let at = StridedLayout { offset, strides: dims(strides) };
        let touched = Touched { len: 0, row: 1, counts: Some(dims(counts)), at };
        let mut runs = Vec::new();
        touched.for_each_run(|start, len| runs.extend(start..start + len));
        let mut each = Vec::new();
        if !counts.contains(&0) {
            for_each_element(counts, &touched.at, &touched.at, |i, _| each.push(i));
        }
        assert_eq!(runs, each, "counts {counts:?}, offset {offset}, strides {strides:?}");
    }

    #[test]
    fn runs_cover_exactly_the_touched_elements_in_order() {
        // Buffer (4, 6, 8): strides 48, 8, 1 (elements).
        check(&[4, 6, 8], 0, &[48, 8, 1]); // whole: one run
        check(&[2, 6, 8], 48, &[48, 8, 1]); // leading rows: one run
        check(&[2, 3, 8], 8, &[48, 8, 1]); // runs of 24
        check(&[2, 3, 4], 10, &[48, 8, 1]); // runs of 4
        check(&[2, 1, 8], 16, &[48, 8, 1]); // a count-1 dim
        check(&[4, 6, 1], 3, &[48, 8, 1]); // one column: single elements
        check(&[2, 3, 4], 0, &[48, 16, 2]); // strided: single elements
        check(&[3, 0, 2], 0, &[48, 8, 1]); // empty
        check(&[], 7, &[]); // scalar
    }
}
