//! The one error type of this crate: what went wrong in decoding or
//! running a program, or in reading a wire code. The runtime converts it
//! into its own error (`mosaic_rt_core::RtError`, same message) and so
//! into a Python exception: [`ProgramErrorKind`] names which.
//!
//! May use: std, `mosaic_rt_wire` (its error converts into this one).

use std::fmt;

/// What kind of failure a [`ProgramError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgramErrorKind {
    /// A bad program, operand or wire code (raised as `ValueError`).
    Value,
    /// The host could not provide scratch memory (raised as `MemoryError`).
    Memory,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramError {
    pub kind: ProgramErrorKind,
    pub message: String,
}

pub type ProgramResult<T, E = ProgramError> = std::result::Result<T, E>;

impl ProgramError {
    pub fn value(message: impl Into<String>) -> Self {
        ProgramError { kind: ProgramErrorKind::Value, message: message.into() }
    }
    pub fn memory(message: impl Into<String>) -> Self {
        ProgramError { kind: ProgramErrorKind::Memory, message: message.into() }
    }
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProgramError {}

/// A bad wire code or name is a bad program or operand.
impl From<mosaic_rt_wire::WireError> for ProgramError {
    fn from(e: mosaic_rt_wire::WireError) -> Self {
        ProgramError::value(e.message)
    }
}
