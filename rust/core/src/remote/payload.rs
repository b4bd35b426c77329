//! Envelope bytes without extra copies: a DMA's data is read straight into
//! the buffer its frame is sent from (room for the header is left in
//! front), and a received frame's data is written from the buffer it
//! arrived in. Large buffers go back to a small pool when dropped, so a
//! stream of DMAs does not fault fresh pages in for every one.

use super::lock;
use std::sync::Mutex;

/// Bytes left in front of a DMA's data for its frame's header.
pub const HEADROOM: usize = 256;

/// Buffers this large and up are pooled.
const POOLED: usize = 64 * 1024;
const POOL_BUFFERS: usize = 32;
const POOL_BYTES: usize = 512 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer of at least `len` initialised bytes (from the pool if one fits).
fn take(len: usize) -> Vec<u8> {
    if len >= POOLED {
        let mut pool = lock(&POOL);
        let best = pool.iter().enumerate().filter(|(_, b)| b.len() >= len).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        if let Some(i) = best {
            return pool.swap_remove(i);
        }
    }
    vec![0u8; len]
}

fn give(buf: Vec<u8>) {
    if buf.len() < POOLED {
        return;
    }
    let mut pool = lock(&POOL);
    let total: usize = pool.iter().map(Vec::len).sum();
    if pool.len() < POOL_BUFFERS && total + buf.len() <= POOL_BYTES {
        pool.push(buf);
    }
}

/// `buf[start..end]`, owning `buf`.
pub struct Payload {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Payload {
    pub fn from_vec(buf: Vec<u8>) -> Payload {
        let end = buf.len();
        Payload { buf, start: 0, end }
    }

    /// `len` bytes (their content unspecified) with [`HEADROOM`] in front.
    pub fn with_headroom(len: usize) -> Payload {
        Payload { buf: take(HEADROOM + len), start: HEADROOM, end: HEADROOM + len }
    }

    /// `len` bytes (their content unspecified), for a receive.
    pub fn for_receive(len: usize) -> Payload {
        Payload { buf: take(len), start: 0, end: len }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }

    /// `header` followed by these bytes (in place when there is room).
    pub fn prefixed(mut self, header: &[u8]) -> Payload {
        if self.start >= header.len() {
            let at = self.start - header.len();
            self.buf[at..self.start].copy_from_slice(header);
            self.start = at;
            return self;
        }
        let mut v = Vec::with_capacity(header.len() + self.len());
        v.extend_from_slice(header);
        v.extend_from_slice(&self);
        Payload::from_vec(v)
    }

    /// The bytes `from..to` of this one (relative), sharing the buffer.
    pub fn slice(mut self, from: usize, to: usize) -> Payload {
        let (start, end) = (self.start + from, self.start + to);
        assert!(start <= end && end <= self.end, "payload slice out of range");
        let buf = std::mem::take(&mut self.buf);
        Payload { buf, start, end }
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.buf));
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

impl Clone for Payload {
    fn clone(&self) -> Payload {
        Payload::from_vec(self.to_vec())
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        **self == **other
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}
