//! The hasher of the core's maps keyed by small integers and ids (buffer
//! keys, semaphore ids, regions): shared by `memory`, `deadlock` and
//! `revisit`, so that none of them reaches into another for it.
//!
//! May use: std only.

use std::hash::Hasher;

/// Multiply-rotate hasher for the small integer keys (SipHash is needlessly
/// slow on the hot path and there is no untrusted input here).
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}
