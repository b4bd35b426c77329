//! Source sites: which kernel line an operation comes from.
//!
//! The core stores only `u32` site ids (0 = unknown). The text of a site
//! (`kernel.py:12:4 (my_kernel)`) lives in a process-wide interning table
//! of the binding layer, which installs a [`set_resolver`] so that the
//! core's reports can name it.
//!
//! The FFI layer sets the site of the operation being executed on the
//! calling thread ([`enter`]) for the duration of the call; everything the
//! core records during that call (a wait, a DMA start, an access, an
//! allocation) takes [`current`]. Work done later on another thread (an
//! on_wait DMA run by a waiter) carries the site it was started with.

use std::cell::Cell;
use std::sync::OnceLock;

pub type SiteId = u32;

thread_local! {
    static CURRENT: Cell<SiteId> = const { Cell::new(0) };
}

/// The site of the operation running on this thread (0 if unknown).
#[inline]
pub fn current() -> SiteId {
    CURRENT.with(|c| c.get())
}

/// Sets this thread's current site until the guard is dropped (then the
/// previous one is back).
#[inline]
pub fn enter(site: SiteId) -> SiteGuard {
    SiteGuard(CURRENT.with(|c| c.replace(site)))
}

pub struct SiteGuard(SiteId);

impl Drop for SiteGuard {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

type Resolver = fn(SiteId) -> Option<String>;

static RESOLVER: OnceLock<Resolver> = OnceLock::new();

/// Installs the function that gives a site id's text (once per process;
/// later calls are ignored).
pub fn set_resolver(f: Resolver) {
    let _ = RESOLVER.set(f);
}

type Interner = fn(&str) -> SiteId;

static INTERNER: OnceLock<Interner> = OnceLock::new();

/// Installs the function that gives a text its site id (once per process).
pub fn set_interner(f: Interner) {
    let _ = INTERNER.set(f);
}

/// The site id of `text` (a site of another process's kernel); 0 if no
/// interner is installed.
pub fn intern(text: &str) -> SiteId {
    INTERNER.get().map_or(0, |f| f(text))
}

/// The text of `site`, if it is known.
pub fn text(site: SiteId) -> Option<String> {
    if site == 0 {
        return None;
    }
    RESOLVER.get().and_then(|f| f(site))
}

/// `" at <site>"`, or nothing for an unknown site: appended to a
/// description of an operation.
pub fn at(site: SiteId) -> String {
    match text(site) {
        Some(t) => format!(" at {t}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_site_is_scoped() {
        assert_eq!(current(), 0);
        {
            let _g = enter(7);
            assert_eq!(current(), 7);
            {
                let _h = enter(9);
                assert_eq!(current(), 9);
            }
            assert_eq!(current(), 7);
        }
        assert_eq!(current(), 0);
        assert_eq!(at(0), "");
    }
}
