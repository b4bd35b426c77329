//! Root-cause errors of failed FFI calls.
//!
//! XLA reports whichever device failed first -- often one that was merely
//! aborted -- and only as a string. So every handler error is reported with
//! the kernel's ROOT cause, tagged `[mosaic_rt#N]`, where N indexes a small
//! process-global table that Python reads back (`take_error_ex`) to raise the
//! right exception type with device and core.

use crate::abi::{self, Api};
use mosaic_rt_core::{IgnorePoison, RtError};
use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::Mutex;

/// Recent root causes kept for Python; older ones are dropped.
const TABLE_SIZE: usize = 64;

struct ErrorTable {
    next: u64,
    entries: VecDeque<(u64, RtError)>,
}

static TABLE: Mutex<ErrorTable> = Mutex::new(ErrorTable { next: 1, entries: VecDeque::new() });

fn same_error(a: &RtError, b: &RtError) -> bool {
    a.kind == b.kind && a.message == b.message && a.device == b.device && a.core == b.core && a.external == b.external
}

/// Records `root` (reusing the number of an equal recent entry, so every
/// device aborted by one failure reports the same N) and returns N.
pub fn record(root: &RtError) -> u64 {
    let mut t = TABLE.lock().ignore_poison();
    if let Some((n, _)) = t.entries.iter().rev().find(|(_, e)| same_error(e, root)) {
        return *n;
    }
    let n = t.next;
    t.next += 1;
    let mut stored = root.clone();
    stored.root = None;
    t.entries.push_back((n, stored));
    if t.entries.len() > TABLE_SIZE {
        t.entries.pop_front();
    }
    n
}

/// The root cause recorded as N, if still in the table.
pub fn lookup(n: u64) -> Option<RtError> {
    let t = TABLE.lock().ignore_poison();
    t.entries.iter().find(|(k, _)| *k == n).map(|(_, e)| e.clone())
}

/// The message XLA carries to Python for root cause number `n`, with the
/// failing op's source line when known: the raw `JaxRuntimeError` of a
/// user outside `native_errors` says where too.
pub fn wire_message(n: u64, root: &RtError) -> String {
    let mut text = format!("[mosaic_rt#{n}] {}: {}", root.type_name(), root.message);
    if let Some(site) = mosaic_rt_core::site::text(root.site) {
        text.push_str(&format!("{SITE_NOTE}{site})"));
    }
    text
}

/// What precedes the site in a wire message (Python strips it from the
/// message: `mosaic_rt.ffi.errors`).
pub const SITE_NOTE: &str = "\n(raised by the kernel op at ";

/// Creates an XLA error owning a copy of `message`.
///
/// # Safety
/// `api` must be the valid API table of the current call.
pub unsafe fn ffi_error(api: &Api, message: &str) -> *mut abi::Error {
    let Some(create) = api.error_create else {
        return std::ptr::null_mut();
    };
    // Interior NULs would truncate the message; replace them.
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    let mut args = abi::ErrorCreateArgs {
        struct_size: std::mem::size_of::<abi::ErrorCreateArgs>(),
        extension_start: std::ptr::null_mut(),
        message: c.as_ptr(),
        errc: abi::ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: `create` is XLA's `XLA_FFI_Error_Create` from a valid API
    // table (the caller's contract), called with a complete args struct and
    // a NUL-terminated message that outlives the call; XLA copies the
    // message, so `c` may be dropped afterwards.
    unsafe { create(&mut args) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mosaic_rt_core::ErrorKind;

    #[test]
    fn equal_roots_share_a_number_and_the_table_is_bounded() {
        let e = RtError::value("boom unique-1").at(1, 0);
        let n = record(&e);
        assert_eq!(record(&e.clone()), n);
        assert_eq!(lookup(n).unwrap().message, "boom unique-1");
        let other = record(&RtError::new(ErrorKind::Timeout, "t unique-2"));
        assert_ne!(other, n);
        for i in 0..TABLE_SIZE + 1 {
            record(&RtError::index(format!("filler {i}")));
        }
        assert!(lookup(n).is_none());
        assert_eq!(wire_message(7, &e), "[mosaic_rt#7] ValueError: boom unique-1");
        let at = RtError::index("oob").at_site(crate::sites::intern("kernel.py:12:3 (k)"));
        assert_eq!(
            wire_message(8, &at),
            "[mosaic_rt#8] IndexError: oob\n(raised by the kernel op at kernel.py:12:3 (k))"
        );
    }
}
