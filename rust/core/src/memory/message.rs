//! Error texts. The out-of-bounds ones reproduce stock interpret mode's
//! messages character for character (users and tests match on them).

use super::{BufferKey, MemorySpace};
use crate::error::{ErrorKind, RtError};
use crate::region::{python_tuple, Region};

pub(crate) fn shape_repr(shape: &[usize]) -> String {
    let items: Vec<String> = shape.iter().map(|n| n.to_string()).collect();
    python_tuple(&items)
}

/// The accessing core and buffer, as stock prints them: `(0 1 vmem 100)`.
pub(crate) struct Who {
    pub device: u32,
    pub core: u32,
    pub space: MemorySpace,
    pub id: u32,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({} {} {} {})", self.device, self.core, self.space.name(), self.id)
    }
}

pub(crate) fn oob_read(who: &Who, region: &Region, logical: &[usize]) -> RtError {
    RtError::index(format!(
        "Out-of-bounds read of {who}: reading [{}] but buffer has shape {}.",
        region.python_repr(),
        shape_repr(logical)
    ))
}

/// A masked load with a selected (mask-true) element out of bounds.
pub(crate) fn oob_masked_read(who: &Who, region: &Region, logical: &[usize]) -> RtError {
    RtError::index(format!(
        "Out-of-bounds masked read of {who}: reading [{}] but buffer has shape {}, and the mask \
         selects elements outside it (masked-off elements may lie out of bounds).",
        region.python_repr(),
        shape_repr(logical)
    ))
}

pub(crate) fn oob_write(who: &Who, region: &Region, logical: &[usize]) -> RtError {
    RtError::new(
        ErrorKind::OutOfBoundsWrite,
        format!(
            "Out-of-bounds write of {who}: writing [{}] but buffer has shape {} .",
            region.python_repr(),
            shape_repr(logical)
        ),
    )
}

pub(crate) fn oob_swap(who: &Who, region: &Region, logical: &[usize]) -> RtError {
    RtError::new(
        ErrorKind::OutOfBoundsWrite,
        format!(
            "Out-of-bounds swap of {who}: swapping [{}] but buffer has shape {} .",
            region.python_repr(),
            shape_repr(logical)
        ),
    )
}

pub(crate) fn oob_masked_swap(who: &Who, region: &Region, logical: &[usize]) -> RtError {
    RtError::new(
        ErrorKind::OutOfBoundsWrite,
        format!(
            "Out-of-bounds masked swap of {who}: swapping [{}] but buffer has shape {} . ",
            region.python_repr(),
            shape_repr(logical)
        ),
    )
}

pub(crate) fn no_such_buffer(key: BufferKey, action: &str) -> RtError {
    RtError::value(format!("cannot {action} {key}: no such buffer (never allocated, or already freed)"))
}

/// `what` ("data", "out", "mask") has the wrong byte length for the region.
pub(crate) fn wrong_len(who: &Who, what: &str, got: usize, shape: &[usize], want: usize) -> RtError {
    RtError::value(format!(
        "{what} for {who} has {got} bytes but the region has shape {} and needs {want} bytes",
        shape_repr(shape)
    ))
}
