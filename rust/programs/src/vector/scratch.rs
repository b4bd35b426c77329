//! Per-thread scratch memory of the vector evaluator: grown once, reused by
//! every call, given back when one call needed very much.
//!
//! May use: `crate::error`.

use crate::error::{ProgramError, ProgramResult};

/// Reusable scratch of one thread (no allocation per call once grown).
pub struct VectorScratch {
    pub(super) words: Vec<u64>,
}

/// Scratch beyond this many words is given back after the call.
const KEEP_WORDS: usize = 1 << 23;

impl VectorScratch {
    pub const fn new() -> VectorScratch {
        VectorScratch { words: Vec::new() }
    }

    pub(super) fn ensure(&mut self, words: usize) -> ProgramResult<()> {
        if self.words.len() < words {
            let more = words - self.words.len();
            self.words.try_reserve_exact(more).map_err(|_| {
                ProgramError::memory(format!("vector program: cannot allocate {} bytes of scratch", words * 8))
            })?;
            self.words.resize(words, 0);
        }
        Ok(())
    }

    pub(super) fn trim(&mut self) {
        if self.words.len() > KEEP_WORDS {
            self.words = Vec::new();
        }
    }
}

impl Default for VectorScratch {
    fn default() -> Self {
        VectorScratch::new()
    }
}
