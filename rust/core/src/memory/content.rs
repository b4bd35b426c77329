//! The bytes of a buffer: our own allocation, or XLA's operand memory
//! borrowed read-only for one launch (an input the kernel never writes,
//! decided by the interpreter), or XLA's result buffer of an output written
//! in place (`Direct`: no copy-out at kernel end), or nothing once such a
//! borrow has ended.
//! A fresh large buffer of fill values may hold a reused allocation's old
//! bytes until its first access (`Unfilled`): a write over the whole
//! buffer replaces them and the fill pass is never made; any other access
//! fills first.
//!
//! Reads and writes go through [`ContentRead`] / [`ContentWrite`], made
//! only from the buffer's lock guard, so a borrowed buffer can never be
//! written (an internal error instead), an ended borrow never read, and old
//! bytes never seen.

use std::fmt::Display;
use std::ops::{Deref, DerefMut};
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Result, RtError};

pub(crate) enum Content {
    Owned(Vec<u8>),
    /// `len` bytes at `ptr`, valid and unchanged until the borrow ends.
    Borrowed {
        ptr: *const u8,
        len: usize,
    },
    /// `len` bytes at `ptr` that we may read and write until the borrow
    /// ends: XLA's result buffer of an output. `pending`: the fill values
    /// (one element) not yet written over XLA's uninitialized bytes.
    Direct {
        ptr: *mut u8,
        len: usize,
        pending: Option<Vec<u8>>,
    },
    /// A borrow that ended, or a buffer being dropped.
    Released,
    /// Our own allocation, still holding old bytes where the fill values
    /// (`pattern`, one element) belong.
    Unfilled {
        v: Vec<u8>,
        pattern: Vec<u8>,
    },
}

// SAFETY: `Borrowed` is a shared, read-only view of memory that its creator
// guarantees valid and unchanged until the borrow ends (see
// `Content::borrowed`); it is only ever read through `&[u8]`, which is
// fine from any thread. `Direct` is memory that its creator guarantees
// exclusively ours until the borrow ends (see `Content::direct`): like a
// `Vec<u8>`, written only through `&mut self` (the buffer's write lock).
// `Owned` is a `Vec<u8>`, which is Send + Sync.
unsafe impl Send for Content {}
// SAFETY: as for Send: shared access only reads.
unsafe impl Sync for Content {}

impl Content {
    /// # Safety
    /// `ptr` must point to `len` readable bytes (any pointer if `len` is 0)
    /// that stay valid and unmodified until [`Content::release_borrowed`]
    /// has run on this value or it is dropped, whichever comes first.
    pub(crate) unsafe fn borrowed(ptr: *const u8, len: usize) -> Content {
        Content::Borrowed { ptr, len }
    }

    /// XLA's result memory, written in place until the borrow ends.
    ///
    /// # Safety
    /// `ptr` must point to `len` writable bytes (non-null, `len` > 0) that
    /// nothing else reads or writes until [`Content::release_borrowed`] has
    /// run on this value or it is dropped, whichever comes first.
    /// `fill`: the values it holds until written (None: it holds its
    /// value already, an aliased input's).
    pub(crate) unsafe fn direct(ptr: *mut u8, len: usize, fill: Option<&[u8]>) -> Content {
        Content::Direct { ptr, len, pending: fill.map(<[u8]>::to_vec) }
    }

    /// XLA's result memory written in place, as (address, length).
    pub(crate) fn direct_range(&self) -> Option<(usize, usize)> {
        match self {
            Content::Direct { ptr, len, .. } => Some((*ptr as usize, *len)),
            _ => None,
        }
    }

    /// Whether the fill values are still to be written.
    pub(crate) fn fill_is_pending(&self) -> bool {
        matches!(self, Content::Unfilled { .. } | Content::Direct { pending: Some(_), .. })
    }

    pub(crate) fn is_borrowed(&self) -> bool {
        matches!(self, Content::Borrowed { .. })
    }

    /// The borrowed memory as (address, length), if borrowed.
    pub(crate) fn borrowed_range(&self) -> Option<(usize, usize)> {
        match self {
            Content::Borrowed { ptr, len } => Some((*ptr as usize, *len)),
            _ => None,
        }
    }

    /// Writes the pending fill values (no-op unless some are pending).
    pub(crate) fn fill_pending(&mut self) {
        match self {
            Content::Unfilled { v, pattern } => {
                let n = v.len();
                let mut v = std::mem::take(v);
                v.clear();
                super::copy::extend_with_pattern(&mut v, n, pattern);
                *self = Content::Owned(v);
            }
            Content::Direct { pending, .. } => {
                if let Some(pattern) = pending.take() {
                    super::copy::fill_pattern(self.bytes_mut(), &pattern);
                }
            }
            _ => {}
        }
    }

    /// Ready for a write: `covers_all` (the write replaces every byte, and
    /// cannot fail once it starts) takes the old bytes as they are,
    /// otherwise pending fill values are written first.
    pub(crate) fn prepare_write(&mut self, covers_all: bool) {
        match self {
            Content::Unfilled { v, .. } => match covers_all {
                true => *self = Content::Owned(std::mem::take(v)),
                false => self.fill_pending(),
            },
            Content::Direct { pending, .. } => match covers_all {
                true => *pending = None,
                false => self.fill_pending(),
            },
            _ => {}
        }
    }

    /// Our own allocation back, for the pool (any other content: none).
    pub(crate) fn into_allocation(self) -> Option<Vec<u8>> {
        match self {
            Content::Owned(v) | Content::Unfilled { v, .. } => Some(v),
            Content::Borrowed { .. } | Content::Direct { .. } | Content::Released => None,
        }
    }

    /// Ends a borrow: `keep` copies the bytes into our own allocation
    /// (after a direct output's pending fill values), otherwise they are
    /// gone without another write. Our own bytes stay as they are.
    pub(crate) fn release_borrowed(&mut self, keep: bool) {
        if keep {
            self.fill_pending();
        }
        if let Content::Borrowed { .. } | Content::Direct { .. } = self {
            *self = match keep {
                true => {
                    let mut v = super::pool::take(self.bytes().len());
                    v.clear();
                    v.extend_from_slice(self.bytes());
                    Content::Owned(v)
                }
                false => Content::Released,
            };
        }
    }

    /// Ends a direct output's borrow at kernel end: its never-written
    /// bytes get the fill values (what the result holds there in stock),
    /// then the memory is XLA's again.
    pub(crate) fn finish_direct(&mut self) {
        if let Content::Direct { .. } = self {
            self.fill_pending();
            *self = Content::Released;
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Content::Owned(v) => v,
            // Never handed out (`ContentRead` / `ContentWrite` refuse it).
            Content::Borrowed { len: 0, .. }
            | Content::Direct { len: 0, .. }
            | Content::Released
            | Content::Unfilled { .. } => &[],
            // SAFETY: a live borrow: `len` readable bytes at `ptr`, unchanged
            // while it lasts (the contract of `Content::borrowed`), and the
            // returned slice lives no longer than `&self`, during which the
            // borrow cannot end (ending it needs `&mut self`).
            Content::Borrowed { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            // SAFETY: a live direct borrow: `len` bytes at `ptr` only we
            // touch while it lasts (the contract of `Content::direct`);
            // the slice lives no longer than `&self`, and writes need
            // `&mut self`.
            Content::Direct { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }

    /// The writable bytes: our own, or XLA's result memory (empty for any
    /// other content; `ContentWrite` refuses those).
    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Content::Owned(v) => v,
            Content::Direct { len: 0, .. } => &mut [],
            // SAFETY: a live direct borrow: `len` writable bytes at `ptr`
            // that nothing else touches while it lasts (the contract of
            // `Content::direct`); the slice is tied to `&mut self`, so it
            // is the only one.
            Content::Direct { ptr, len, .. } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            _ => &mut [],
        }
    }
}

/// Read access to a buffer's bytes.
pub(crate) struct ContentRead<'a>(RwLockReadGuard<'a, Content>);

impl<'a> ContentRead<'a> {
    pub(crate) fn new(guard: RwLockReadGuard<'a, Content>, who: &dyn Display) -> Result<Self> {
        match *guard {
            Content::Released => Err(RtError::internal(format!(
                "{who}: read of a borrowed input buffer after its device left the launch"
            ))),
            Content::Unfilled { .. } | Content::Direct { pending: Some(_), .. } => {
                Err(RtError::internal(format!("{who}: read before the fill values")))
            }
            _ => Ok(ContentRead(guard)),
        }
    }
}

impl Deref for ContentRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// Write access to a buffer's own bytes or XLA's result memory (never to
/// borrowed inputs).
pub(crate) struct ContentWrite<'a>(RwLockWriteGuard<'a, Content>);

impl<'a> ContentWrite<'a> {
    pub(crate) fn new(guard: RwLockWriteGuard<'a, Content>, who: &dyn Display) -> Result<Self> {
        match *guard {
            Content::Owned(_) | Content::Direct { pending: None, .. } => Ok(ContentWrite(guard)),
            Content::Borrowed { .. } => Err(RtError::internal(format!(
                "{who}: write to an input buffer borrowed read-only from XLA (the interpreter \
                 judged that the kernel never writes this input; please report this kernel)"
            ))),
            Content::Released => Err(RtError::internal(format!(
                "{who}: write to a borrowed input buffer after its device left the launch"
            ))),
            Content::Unfilled { .. } | Content::Direct { pending: Some(_), .. } => {
                Err(RtError::internal(format!("{who}: write before the fill values")))
            }
        }
    }
}

impl Deref for ContentWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.bytes()
    }
}

impl DerefMut for ContentWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // `new` admits only writable bytes (our own, or a direct result
        // with its fill done) and the guard keeps them so.
        self.0.bytes_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::RwLock;

    #[test]
    fn borrowed_bytes_read_but_never_write() {
        let data = [1u8, 2, 3, 4];
        // SAFETY: `data` outlives `lock` and is not modified meanwhile.
        let lock = RwLock::new(unsafe { Content::borrowed(data.as_ptr(), data.len()) });
        assert_eq!(&*ContentRead::new(lock.read().unwrap(), &"b").unwrap(), &[1, 2, 3, 4]);
        let err = ContentWrite::new(lock.write().unwrap(), &"hbm buffer 100").err().unwrap();
        assert_eq!(err.kind, crate::error::ErrorKind::Internal);
        assert!(err.message.contains("hbm buffer 100: write to an input buffer borrowed read-only"));
    }

    #[test]
    fn old_bytes_are_replaced_whole_or_filled_over() {
        let unfilled = || Content::Unfilled { v: vec![9u8; 8], pattern: vec![1, 2] };
        let lock = RwLock::new(unfilled());
        assert!(ContentRead::new(lock.read().unwrap(), &"b").is_err(), "old bytes are never read");
        lock.write().unwrap().fill_pending();
        assert_eq!(&*ContentRead::new(lock.read().unwrap(), &"b").unwrap(), &[1, 2, 1, 2, 1, 2, 1, 2]);
        let lock = RwLock::new(unfilled());
        lock.write().unwrap().prepare_write(false);
        assert_eq!(&*ContentRead::new(lock.read().unwrap(), &"b").unwrap(), &[1, 2, 1, 2, 1, 2, 1, 2]);
        let lock = RwLock::new(unfilled());
        let mut g = lock.write().unwrap();
        g.prepare_write(true);
        let mut w = ContentWrite::new(g, &"b").unwrap();
        w.copy_from_slice(&[5; 8]);
        drop(w);
        assert_eq!(&*ContentRead::new(lock.read().unwrap(), &"b").unwrap(), &[5; 8]);
    }

    #[test]
    fn release_keeps_a_copy_or_nothing() {
        let data = vec![5u8; 300_000];
        // SAFETY: `data` outlives both values and is not modified meanwhile.
        let (mut kept, mut gone) =
            unsafe { (Content::borrowed(data.as_ptr(), data.len()), Content::borrowed(data.as_ptr(), data.len())) };
        kept.release_borrowed(true);
        gone.release_borrowed(false);
        assert!(matches!(&kept, Content::Owned(v) if v[..] == data[..] && v.as_ptr() != data.as_ptr()));
        let lock = RwLock::new(gone);
        let err = ContentRead::new(lock.read().unwrap(), &"b").err().unwrap();
        assert!(err.message.contains("after its device left the launch"), "{err}");
        let mut w = ContentWrite::new(RwLock::new(kept).write().unwrap(), &"b").map(|_| ()).ok();
        assert!(w.take().is_some(), "the kept copy is ours to write");
    }
}
