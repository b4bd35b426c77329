//! What a swap writes: a value of the region's shape, or one element
//! repeated over the region (a fill: kernels initialise scratch and
//! accumulators with a constant, and no region-sized value need exist).

use std::borrow::Cow;

use super::access::zeroed;
use super::copy::{fill_pattern, StridedLayout};
use crate::error::Result;

/// The value a swap writes into a region.
#[derive(Clone, Copy, Debug)]
pub enum Stored<'a> {
    /// C-order bytes of the region's shape.
    Dense(&'a [u8]),
    /// One element (`itemsize` bytes) written to every element of the region.
    Splat(&'a [u8]),
}

impl<'a> Stored<'a> {
    /// The length the value must have for a region of `bytes` bytes.
    pub(crate) fn expected_len(&self, bytes: usize, itemsize: usize) -> usize {
        match self {
            Stored::Dense(_) => bytes,
            Stored::Splat(_) => itemsize,
        }
    }

    pub(crate) fn bytes(&self) -> &'a [u8] {
        match self {
            Stored::Dense(b) | Stored::Splat(b) => b,
        }
    }

    /// Bytes to copy from and where element (i0, .., in) of a `full`-shaped
    /// region is in them. A splat is one innermost row of the element
    /// (outer strides 0), so a copy is still one memcpy per row.
    pub(crate) fn source(&self, full: &[usize], itemsize: usize) -> Result<(Cow<'a, [u8]>, StridedLayout)> {
        Ok(match *self {
            Stored::Dense(b) => (Cow::Borrowed(b), StridedLayout::dense(full, itemsize)),
            Stored::Splat(element) => {
                let row = full.last().copied().unwrap_or(1);
                let mut bytes = zeroed(row * itemsize, || "a row of a fill".to_string())?;
                fill_pattern(&mut bytes, element);
                let mut layout = StridedLayout::dense(full, itemsize);
                let outer = full.len().saturating_sub(1);
                for s in layout.strides.iter_mut().take(outer) {
                    *s = 0;
                }
                (Cow::Owned(bytes), layout)
            }
        })
    }

    /// The value as C-order bytes of a region of `bytes` bytes (a copy for
    /// a splat: for the rare paths that index the value element by element).
    pub(crate) fn dense(&self, bytes: usize) -> Result<Cow<'a, [u8]>> {
        Ok(match *self {
            Stored::Dense(b) => Cow::Borrowed(b),
            Stored::Splat(element) => {
                let mut v = zeroed(bytes, || "a filled value".to_string())?;
                fill_pattern(&mut v, element);
                Cow::Owned(v)
            }
        })
    }
}
