//! Array operands and results in simulated memory's element layout.
//!
//! XLA's CPU runtime hands FFI handlers the sub-byte dtypes (int4, uint4,
//! int2, uint2, float4_e2m1fn) packed several per byte, while simulated
//! memory (like numpy / ml_dtypes) keeps one element per byte. These helpers
//! unpack operands and pack results at that boundary; every other dtype
//! passes through without a copy.

use std::borrow::Cow;

use crate::frame::Buf;
use mosaic_rt_core::Result;

impl<'a> Buf<'a> {
    /// The operand's elements, `itemsize` bytes each (a copy only for the
    /// packed sub-byte dtypes).
    pub fn elements(&self) -> Result<Cow<'a, [u8]>> {
        let dtype = self.dtype()?;
        let raw = self.bytes()?;
        if !dtype.is_packed() {
            return Ok(Cow::Borrowed(raw));
        }
        let mut out = vec![0u8; self.num_elements()];
        dtype.unpack(raw, &mut out);
        Ok(Cow::Owned(out))
    }

    /// Lets `fill` write the result's elements (`itemsize` bytes each), then
    /// packs them into XLA's buffer for the sub-byte dtypes. Nothing is
    /// packed when `fill` fails.
    ///
    /// # Safety
    /// As for [`Buf::bytes_mut`]: this result buffer must not be referenced
    /// by any other live slice while `fill` runs.
    pub unsafe fn fill_elements<T>(&self, fill: impl FnOnce(&mut [u8]) -> Result<T>) -> Result<T> {
        let dtype = self.dtype()?;
        // SAFETY: exclusivity of this result buffer is the caller's contract.
        let raw = unsafe { self.bytes_mut()? };
        if !dtype.is_packed() {
            return fill(raw);
        }
        let mut elements = vec![0u8; self.num_elements()];
        let result = fill(&mut elements)?;
        dtype.pack(&elements, raw);
        Ok(result)
    }
}
