//! The few `dlopen` / `dlsym` calls needed to find a loaded library's symbols.

use mosaic_rt_core::{Result, RtError};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// A handle of a library that was loaded already (never loads one).
pub struct Library {
    handle: *mut c_void,
    path: String,
}

// SAFETY: a dlopen handle is a process-wide token; dlsym is thread-safe.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
    // the next dl* call on this thread, copied at once.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// The already-loaded library at `path`.
    pub fn loaded(path: &str) -> Result<Library> {
        let c = CString::new(path).map_err(|_| RtError::value("library path contains a NUL byte"))?;
        // SAFETY: a NUL-terminated path; RTLD_NOLOAD only looks the library up.
        let handle = unsafe { dlopen(c.as_ptr(), RTLD_NOW | RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(RtError::value(format!("{path} is not loaded in this process: {}", last_error())));
        }
        Ok(Library { handle, path: path.to_string() })
    }

    /// The address of `name` in the library or its dependencies.
    pub fn symbol(&self, name: &str) -> Result<*mut c_void> {
        let c = CString::new(name).map_err(|_| RtError::value("symbol name contains a NUL byte"))?;
        // SAFETY: a live handle from dlopen and a NUL-terminated name.
        let p = unsafe { dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(RtError::value(format!("{name} not found through {}: {}", self.path, last_error())));
        }
        Ok(p)
    }
}
