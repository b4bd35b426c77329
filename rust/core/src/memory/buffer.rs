//! One simulated buffer: its shapes, dtype and bytes behind their own lock,
//! so accesses to different buffers never contend.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::copy::extend_with_pattern;
use super::init_shadow::InitShadow;
use super::message::shape_repr;
use super::BufferInfo;
use crate::dtype::DType;
use crate::error::{Result, RtError};
use crate::sync::IgnorePoison;

pub(crate) struct Buffer {
    pub dtype: DType,
    /// Allocated (possibly padded) shape.
    pub shape: Vec<usize>,
    pub logical_shape: Vec<usize>,
    /// Changed only under the owning table shard's write lock.
    pub ref_count: AtomicU32,
    content: RwLock<Vec<u8>>,
    /// initcheck: which elements were written (only with detection on).
    init: Option<InitShadow>,
}

/// Number of elements of `shape`, or a ValueError on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| RtError::value(format!("shape {} is too large", shape_repr(shape))))
}

impl Buffer {
    /// A buffer of `shape` filled with `fill` (one element's bytes), with
    /// `init` (C-order bytes of `logical_shape`) placed in the low corner.
    /// With `track_init` (initcheck), the elements `init` gives are marked
    /// written and all others not.
    pub fn new(
        dtype: DType,
        shape: &[usize],
        logical_shape: &[usize],
        fill: &[u8],
        init: Option<&[u8]>,
        ref_count: u32,
        track_init: bool,
    ) -> Result<Buffer> {
        let bytes = element_count(shape)?
            .checked_mul(dtype.itemsize())
            .ok_or_else(|| RtError::value(format!("shape {} is too large", shape_repr(shape))))?;
        let mut content = Vec::new();
        content.try_reserve_exact(bytes).map_err(|_| {
            RtError::value(format!(
                "cannot allocate {bytes} bytes for a {} buffer of shape {}",
                dtype.name(),
                shape_repr(shape)
            ))
        })?;
        match init {
            // The whole content given: one pass, no fill.
            Some(init) if shape == logical_shape && init.len() == bytes => content.extend_from_slice(init),
            _ => {
                if init.is_none() || shape != logical_shape {
                    extend_with_pattern(&mut content, bytes, fill);
                } else {
                    content.resize(bytes, 0);
                }
                if let Some(init) = init {
                    let itemsize = dtype.itemsize();
                    let full = super::copy::Layout::dense(logical_shape, itemsize);
                    let dst = super::copy::Layout::dense(shape, itemsize);
                    super::copy::copy_block(init, &full, &mut content, &dst, logical_shape, itemsize);
                }
            }
        }
        let init_shadow = match track_init {
            false => None,
            true => {
                let shadow = InitShadow::new(element_count(shape)?)?;
                if init.is_some() {
                    let logical = super::copy::Layout::dense(shape, 1);
                    let mut c = super::dims::Dims::new();
                    logical_shape.iter().for_each(|&n| c.push(n));
                    super::elements::Touched { len: 0, row: 1, counts: Some(c), at: logical }
                        .for_each_run(|start, len| shadow.mark_range(start, len));
                }
                Some(shadow)
            }
        };
        Ok(Buffer {
            dtype,
            shape: shape.to_vec(),
            logical_shape: logical_shape.to_vec(),
            ref_count: AtomicU32::new(ref_count),
            content: RwLock::new(content),
            init: init_shadow,
        })
    }

    /// The initcheck shadow (`None` unless `detect_uninitialized`).
    #[inline]
    pub(crate) fn init_shadow(&self) -> Option<&InitShadow> {
        self.init.as_ref()
    }

    pub fn info(&self) -> BufferInfo {
        BufferInfo {
            dtype: self.dtype,
            shape: self.shape.clone(),
            logical_shape: self.logical_shape.clone(),
            ref_count: self.ref_count.load(Ordering::Relaxed),
        }
    }

    /// Read access to the bytes. Poisoning is ignored: a panic elsewhere is
    /// reported at the FFI boundary and must not wedge every other core.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.content.read().ignore_poison()
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.content.write().ignore_poison()
    }
}
