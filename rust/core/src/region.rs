//! Rectangular, strided regions of an N-d buffer.
//!
//! A region selects, per leading dimension of a buffer, `size` elements
//! starting at `start` with step `stride`; an integer index is a dimension of
//! size 1 that is `squeezed` out of the result shape. Dimensions not listed
//! are taken whole. This is what Pallas `NDIndexer`s reduce to once their
//! dynamic starts are known.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DimSel {
    pub start: i64,
    pub size: i64,
    pub stride: i64,
    /// An integer index: `size == 1`, and the dim is dropped from the result.
    pub squeezed: bool,
}

impl DimSel {
    pub fn slice(start: i64, size: i64, stride: i64) -> Self {
        DimSel { start, size, stride, squeezed: false }
    }
    pub fn index(i: i64) -> Self {
        DimSel { start: i, size: 1, stride: 1, squeezed: true }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Region {
    pub dims: Vec<DimSel>,
}

impl Region {
    pub fn new(dims: Vec<DimSel>) -> Self {
        Region { dims }
    }
    /// The whole buffer.
    pub fn full() -> Self {
        Region { dims: Vec::new() }
    }
}
