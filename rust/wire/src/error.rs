//! The error of reading a wire code or name: always the caller's mistake
//! (a bad argument or a corrupt program), so the layers above raise it as
//! a `ValueError` (`From` conversions into their own errors keep the text).
//!
//! May use: std only.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub message: String,
}

impl WireError {
    pub fn new(message: impl Into<String>) -> Self {
        WireError { message: message.into() }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WireError {}
