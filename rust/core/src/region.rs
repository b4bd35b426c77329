//! Rectangular, strided regions of an N-d buffer.
//!
//! A region selects, per leading dimension of a buffer, `size` elements
//! starting at `start` with step `stride`; an integer index is a dimension of
//! size 1 that is `squeezed` out of the result shape. Dimensions not listed
//! are taken whole. This is what Pallas `NDIndexer`s reduce to once their
//! dynamic starts are known.
//!
//! The one region type of the Rust side. The layers above only carry it:
//! the FFI reads one from an op's attributes (`RegionAttrs` names them: the
//! static sizes, strides and squeezed flags) and a start-vector operand; the
//! binding converts Python's spelling (`RegionArg`: `None` or per-dimension
//! ints and `(start, size[, stride])` tuples). On the Python side,
//! `mosaic_rt.ffi.ops.TracedRegion` is the trace-time description an op is
//! emitted with (static sizes, traced starts).

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

impl Region {
    /// Checks the region against a buffer of rank `rank`: at most `rank`
    /// dims, starts >= 0, sizes >= 0, strides >= 1, squeezed dims of size 1,
    /// and `start + size * stride` representable.
    pub fn validate(&self, rank: usize) -> crate::error::Result<()> {
        use crate::error::RtError;
        if self.dims.len() > rank {
            return Err(RtError::value(format!(
                "region {} has {} dims but the buffer has rank {rank}",
                self.python_repr(),
                self.dims.len()
            )));
        }
        for (k, d) in self.dims.iter().enumerate() {
            let bad = if d.start < 0 {
                Some("a negative start")
            } else if d.size < 0 {
                Some("a negative size")
            } else if d.stride < 1 {
                Some("a stride below 1")
            } else if d.squeezed && d.size != 1 {
                Some("an integer index with size != 1")
            } else if d.size.checked_mul(d.stride).and_then(|n| n.checked_add(d.start)).is_none() {
                Some("an end index that overflows")
            } else {
                None
            };
            if let Some(why) = bad {
                return Err(RtError::value(format!("invalid region: dim {k} ({d:?}) has {why}")));
            }
        }
        Ok(())
    }

    /// The Python repr of the range stock interpret mode prints in errors:
    /// a tuple of `slice(start, stop, step)` and ints, listed dims only.
    pub fn python_repr(&self) -> String {
        let parts: Vec<String> = self
            .dims
            .iter()
            .map(|d| {
                if d.squeezed {
                    d.start.to_string()
                } else {
                    let stop = d.start.saturating_add(d.size.saturating_mul(d.stride));
                    format!("slice({}, {}, {})", d.start, stop, d.stride)
                }
            })
            .collect();
        python_tuple(&parts)
    }
}

impl Region {
    /// The region in Python slice notation, listed dims only:
    /// `[0:8, 3, 0:16:2]`; the empty string for the whole buffer.
    pub fn slice_repr(&self) -> String {
        if self.dims.is_empty() {
            return String::new();
        }
        format!("[{}]", self.dims.iter().map(dim_repr).collect::<Vec<_>>().join(", "))
    }

    /// The region in slice notation over every dim of a buffer of `shape`
    /// (dims the region does not list are taken whole): `[0:8, 0:128]`.
    pub fn slice_repr_in(&self, shape: &[usize]) -> String {
        let mut parts: Vec<String> = self.dims.iter().map(dim_repr).collect();
        for &n in shape.iter().skip(self.dims.len()) {
            parts.push(format!("0:{n}"));
        }
        format!("[{}]", parts.join(", "))
    }
}

fn dim_repr(d: &DimSel) -> String {
    if d.squeezed {
        return d.start.to_string();
    }
    let stop = d.start.saturating_add(d.size.saturating_mul(d.stride));
    if d.stride == 1 {
        format!("{}:{stop}", d.start)
    } else {
        format!("{}:{stop}:{}", d.start, d.stride)
    }
}

/// `(a, b)`, `(a,)` or `()` -- Python's tuple repr of already-formatted items.
pub fn python_tuple<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => "()".to_string(),
        [one] => format!("({},)", one.as_ref()),
        _ => {
            let joined: Vec<&str> = items.iter().map(|s| s.as_ref()).collect();
            format!("({})", joined.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_reprs() {
        assert_eq!(Region::full().python_repr(), "()");
        assert_eq!(Region::new(vec![DimSel::slice(0, 8, 1)]).python_repr(), "(slice(0, 8, 1),)");
        assert_eq!(Region::new(vec![DimSel::slice(2, 3, 2), DimSel::index(3)]).python_repr(), "(slice(2, 8, 2), 3)");
        assert_eq!(python_tuple(&["8", "128"]), "(8, 128)");
    }

    #[test]
    fn slice_notation() {
        assert_eq!(Region::full().slice_repr(), "");
        assert_eq!(Region::full().slice_repr_in(&[8, 128]), "[0:8, 0:128]");
        let r = Region::new(vec![DimSel::slice(2, 3, 2), DimSel::index(3)]);
        assert_eq!(r.slice_repr(), "[2:8:2, 3]");
        assert_eq!(Region::new(vec![DimSel::slice(8, 8, 1)]).slice_repr_in(&[16, 128]), "[8:16, 0:128]");
    }

    #[test]
    fn validation() {
        let ok = Region::new(vec![DimSel::slice(0, 0, 1), DimSel::index(5)]);
        assert!(ok.validate(2).is_ok());
        assert!(ok.validate(1).is_err());
        for bad in [
            DimSel::slice(-1, 1, 1),
            DimSel::slice(0, -1, 1),
            DimSel::slice(0, 1, 0),
            DimSel { start: 0, size: 2, stride: 1, squeezed: true },
            DimSel::slice(i64::MAX, 2, 1),
        ] {
            let e = Region::new(vec![bad]).validate(1).unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Value, "{bad:?}");
        }
    }
}
