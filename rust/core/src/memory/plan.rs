//! A region resolved against one buffer: per buffer dim, the selected
//! start/size/stride (unlisted trailing dims are whole dims of the LOGICAL
//! shape), plus the bounds rules of stock interpret mode.
//!
//! "Result dims" are the dims of the value a load returns: the buffer dims
//! minus the squeezed (integer-indexed) ones.

use super::copy::StridedLayout;
use super::dims::Dims;
use crate::error::Result;
use crate::region::Region;

#[derive(Clone, Copy, Debug, Default)]
struct DimPlan {
    start: usize,
    size: usize,
    stride: usize,
    squeezed: bool,
}

impl DimPlan {
    /// Number of selected indices below `bound` (None: start >= bound, which
    /// stock treats as entirely out of bounds even for empty slices).
    fn clip(&self, bound: usize) -> Option<usize> {
        if self.start >= bound {
            return None;
        }
        let stop = (self.start + self.size * self.stride).min(bound);
        Some((stop - self.start).div_ceil(self.stride))
    }
}

/// A region resolved against one buffer's logical shape (per buffer dim).
#[derive(Clone, Debug)]
pub(crate) struct RegionPlan {
    dims: Dims<DimPlan>,
}

impl RegionPlan {
    /// Validates `region` for a buffer with `logical` shape and resolves it.
    pub fn new(region: &Region, logical: &[usize]) -> Result<RegionPlan> {
        region.validate(logical.len())?;
        let mut dims = Dims::new();
        for d in &region.dims {
            // `validate` guarantees these are non-negative and do not overflow.
            dims.push(DimPlan {
                start: d.start as usize,
                size: d.size as usize,
                stride: d.stride as usize,
                squeezed: d.squeezed,
            });
        }
        for &n in &logical[region.dims.len()..] {
            dims.push(DimPlan { start: 0, size: n, stride: 1, squeezed: false });
        }
        Ok(RegionPlan { dims })
    }

    /// Shape of the value a fully in-bounds load returns.
    pub fn full_shape(&self) -> Dims<usize> {
        let mut out = Dims::new();
        for d in self.dims.iter().filter(|d| !d.squeezed) {
            out.push(d.size);
        }
        out
    }

    /// Per result dim, how many selected indices lie within `shape`
    /// (stock `clip_range_to_shape`); None when entirely out of bounds.
    pub fn clip(&self, shape: &[usize]) -> Option<Dims<usize>> {
        let mut out = Dims::new();
        for (d, &bound) in self.dims.iter().zip(shape) {
            let n = d.clip(bound)?;
            if !d.squeezed {
                out.push(n);
            }
        }
        Some(out)
    }

    /// Whether any selected index lies outside `shape` (stock
    /// `is_range_out_of_bounds_for_shape`).
    pub fn any_out_of(&self, shape: &[usize]) -> bool {
        self.dims.iter().zip(shape).any(|(d, &bound)| {
            if d.squeezed {
                d.start >= bound
            } else {
                d.size > 0 && d.start + (d.size - 1) * d.stride >= bound
            }
        })
    }

    /// Whether the selection is every element of a buffer of `shape`, each
    /// once, in C order (a write through it leaves no old byte).
    pub fn covers(&self, shape: &[usize]) -> bool {
        self.dims.len() == shape.len()
            && self.dims.iter().zip(shape).all(|(d, &n)| {
                d.start == 0
                    && match d.squeezed {
                        true => n == 1,
                        false => d.size == n && (d.stride == 1 || n <= 1),
                    }
            })
    }

    /// Byte layout of the selection inside a C-order buffer of `content`
    /// shape, over the result dims.
    pub fn buffer_layout(&self, content: &[usize], itemsize: usize) -> StridedLayout {
        let mut strides = Dims::filled(self.dims.len(), 0usize);
        let mut acc = itemsize;
        for k in (0..content.len()).rev() {
            strides[k] = acc;
            acc *= content[k];
        }
        let mut offset = 0;
        let mut result_strides = Dims::new();
        for (d, &s) in self.dims.iter().zip(strides.iter()) {
            offset += d.start * s;
            if !d.squeezed {
                result_strides.push(d.stride * s);
            }
        }
        StridedLayout { offset, strides: result_strides }
    }
}
