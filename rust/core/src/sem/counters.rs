//! Dense, lazily materialised semaphore counters.
//!
//! One allocation of `n` semaphores on a runtime of `c` global cores needs
//! `n * c` counters, but kernels touch only a few of them (a
//! `SemaphoreType.REGULAR((50_000_000,))` array is mostly never signalled).
//! So the counters live in fixed-size pages that are allocated on the first
//! signal or wait that needs one; the page table itself is allocated zeroed
//! (all-null), which the OS maps lazily too. An untouched semaphore costs a
//! fraction of a byte per core; a touched one 8 bytes (its page: 4 KiB).
//!
//! Reads (`peek`, leak scans) never materialise a page: an absent page
//! holds zeros. Allocations of at most one page are dense instead (allocated
//! at once, one load less on the hot path).

use crate::error::Result;
use crate::sync::{AtomicI64, AtomicPtr, Ordering};

/// Counters per page (a power of two). Small under loom, whose atomics are
/// heavyweight model objects.
pub(crate) const PAGE: usize = if cfg!(loom) { 4 } else { 512 };

/// Allocations of at most this many counters are dense (the loom models
/// of lazy pages use tables of more than one page).
const DENSE_MAX: usize = PAGE;

type Page = [AtomicI64; PAGE];

pub(crate) struct Counters {
    len: usize,
    /// Small allocations: every counter, allocated at once.
    dense: Box<[AtomicI64]>,
    /// Larger ones: lazily materialised pages (no entries when dense).
    pages: Box<[AtomicPtr<Page>]>,
}

impl Counters {
    /// `len` zero counters: small ones at once, else only the (zeroed) page
    /// table.
    pub fn new(len: usize) -> Result<Counters> {
        if len <= DENSE_MAX {
            let dense = (0..len).map(|_| AtomicI64::new(0)).collect();
            return Ok(Counters { len, dense, pages: Box::new([]) });
        }
        let num_pages = len.div_ceil(PAGE);
        Ok(Counters { len, dense: Box::new([]), pages: null_table(num_pages)? })
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Counter `i` (< len), materialising its page if needed.
    #[inline]
    pub fn get(&self, i: usize) -> Result<&AtomicI64> {
        debug_assert!(i < self.len);
        if let Some(c) = self.dense.get(i) {
            return Ok(c);
        }
        let slot = &self.pages[i / PAGE];
        let page = slot.load(Ordering::Acquire);
        let page = if page.is_null() { self.materialise(slot)? } else { page };
        // SAFETY: a non-null entry points at a page published with Release
        // (acquired above or by `materialise`) and freed only in `drop`,
        // which needs `&mut self`: the page outlives the borrow of `self`.
        Ok(unsafe { &(*page)[i % PAGE] })
    }

    /// Counter `i` (< len) if its page exists.
    #[inline]
    pub fn get_if_present(&self, i: usize) -> Option<&AtomicI64> {
        if let Some(c) = self.dense.get(i) {
            return Some(c);
        }
        let page = self.pages.get(i / PAGE)?.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        unsafe { page.as_ref() }.map(|p| &p[i % PAGE])
    }

    /// Current value of counter `i` (< len) without materialising anything.
    #[inline]
    pub fn peek(&self, i: usize) -> i64 {
        if let Some(c) = self.dense.get(i) {
            return c.load(Ordering::SeqCst);
        }
        let page = self.pages[i / PAGE].load(Ordering::Acquire);
        if page.is_null() {
            return 0;
        }
        // SAFETY: as in `get`.
        unsafe { (*page)[i % PAGE].load(Ordering::SeqCst) }
    }

    /// Calls `f(index, value)` for every non-zero counter (only
    /// materialised pages are visited).
    pub fn for_each_nonzero(&self, mut f: impl FnMut(usize, i64)) {
        for (i, c) in self.dense.iter().enumerate() {
            let v = c.load(Ordering::SeqCst);
            if v != 0 {
                f(i, v);
            }
        }
        for (p, slot) in self.pages.iter().enumerate() {
            let page = slot.load(Ordering::Acquire);
            if page.is_null() {
                continue;
            }
            // SAFETY: as in `get`.
            let page = unsafe { &*page };
            for (k, c) in page.iter().enumerate() {
                let v = c.load(Ordering::SeqCst);
                let i = p * PAGE + k;
                if v != 0 && i < self.len {
                    f(i, v);
                }
            }
        }
    }

    /// Pages materialised so far (memory diagnostics; dense counters count
    /// as one page).
    pub fn pages_in_use(&self) -> usize {
        usize::from(!self.dense.is_empty()) + self.pages.iter().filter(|p| !p.load(Ordering::Acquire).is_null()).count()
    }

    #[cold]
    #[inline(never)]
    fn materialise(&self, slot: &AtomicPtr<Page>) -> Result<*mut Page> {
        let fresh = new_page()?;
        match slot.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(fresh),
            Err(existing) => {
                // SAFETY: `fresh` came from `new_page` (a leaked Box) and was
                // never published: this is its only owner.
                drop(unsafe { Box::from_raw(fresh) });
                Ok(existing)
            }
        }
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        for slot in self.pages.iter() {
            let page = slot.load(Ordering::Acquire);
            if !page.is_null() {
                // SAFETY: every non-null entry is a page leaked by `new_page`
                // and published once; `&mut self` means no borrow of it is
                // alive, and each entry is freed exactly once, here.
                drop(unsafe { Box::from_raw(page) });
            }
        }
    }
}

#[cfg(not(loom))] // loom builds allocate through loom, which cannot fail
fn out_of_memory(what: &str, bytes: usize) -> crate::error::RtError {
    crate::error::RtError::memory(format!("cannot allocate {bytes} bytes for {what}"))
}

/// A zeroed page, leaked (owned by the table entry it gets published in).
#[cfg(not(loom))]
fn new_page() -> Result<*mut Page> {
    let layout = std::alloc::Layout::new::<Page>();
    // SAFETY: `Page` is not zero-sized.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Page>();
    if ptr.is_null() {
        return Err(out_of_memory("semaphore counters", layout.size()));
    }
    // All-zero bytes are a valid `[AtomicI64; PAGE]` (same layout as
    // `[i64; PAGE]`), and a pointer from the global allocator with
    // `Layout::new::<Page>()` is what `Box::<Page>::from_raw` expects.
    Ok(ptr)
}

#[cfg(loom)]
fn new_page() -> Result<*mut Page> {
    Ok(Box::into_raw(Box::new(std::array::from_fn(|_| AtomicI64::new(0)))))
}

/// `n` null page pointers. Allocated zeroed, so a huge table costs only the
/// OS pages a signal or wait actually touches.
#[cfg(not(loom))]
fn null_table(n: usize) -> Result<Box<[AtomicPtr<Page>]>> {
    if n == 0 {
        return Ok(Box::new([]));
    }
    let bytes = n.saturating_mul(std::mem::size_of::<AtomicPtr<Page>>());
    let layout = std::alloc::Layout::array::<AtomicPtr<Page>>(n)
        .map_err(|_| out_of_memory("the semaphore page table", bytes))?;
    // SAFETY: `layout` is not zero-sized (n > 0).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicPtr<Page>>();
    if ptr.is_null() {
        return Err(out_of_memory("the semaphore page table", bytes));
    }
    // SAFETY: `ptr` is a fresh, zeroed allocation of `Layout::array::<T>(n)`
    // (the layout `Box<[T]>` of length n frees with). `AtomicPtr<T>` has the
    // representation of `*mut T`, and all-zero bytes are the null pointer
    // (`ptr::null_mut` is documented as zero-initialisation), so every
    // element is a valid null `AtomicPtr`.
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)) })
}

#[cfg(loom)]
fn null_table(n: usize) -> Result<Box<[AtomicPtr<Page>]>> {
    Ok((0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn small_counters_are_dense() {
        let c = Counters::new(PAGE).unwrap();
        assert_eq!(c.pages_in_use(), 1);
        c.get(PAGE - 1).unwrap().store(2, Ordering::SeqCst);
        assert_eq!(c.get_if_present(PAGE - 1).unwrap().load(Ordering::SeqCst), 2);
        assert_eq!(c.peek(PAGE - 1), 2);
        let mut seen = Vec::new();
        c.for_each_nonzero(|i, v| seen.push((i, v)));
        assert_eq!(seen, vec![(PAGE - 1, 2)]);
        assert_eq!(Counters::new(0).unwrap().pages_in_use(), 0);
    }

    #[test]
    fn counters_materialise_only_touched_pages() {
        let c = Counters::new(10 * PAGE + 3).unwrap();
        assert_eq!(c.len(), 10 * PAGE + 3);
        assert_eq!(c.pages_in_use(), 0);
        assert_eq!(c.peek(5), 0);
        assert_eq!(c.pages_in_use(), 0);
        c.get(5).unwrap().fetch_add(3, Ordering::SeqCst);
        c.get(10 * PAGE + 2).unwrap().fetch_add(-1, Ordering::SeqCst);
        assert_eq!(c.pages_in_use(), 2);
        assert_eq!(c.peek(5), 3);
        let mut seen = Vec::new();
        c.for_each_nonzero(|i, v| seen.push((i, v)));
        assert_eq!(seen, vec![(5, 3), (10 * PAGE + 2, -1)]);
    }

    #[test]
    fn a_huge_table_is_virtual() {
        // 2**30 counters: a 16 MiB page table nobody touches.
        let c = Counters::new(1 << 30).unwrap();
        c.get((1 << 30) - 1).unwrap().store(7, Ordering::SeqCst);
        assert_eq!(c.peek((1 << 30) - 1), 7);
        assert_eq!(c.pages_in_use(), 1);
    }

    #[test]
    fn an_impossible_table_is_a_memory_error() {
        let e = Counters::new(usize::MAX).err().unwrap();
        assert_eq!(e.kind, crate::ErrorKind::Memory);
        assert!(e.message.contains("bytes"), "{e}");
    }
}
