//! Zero-copy access to Python buffers (numpy arrays, bytearrays, ...).
//! Only C-contiguous buffers are accepted; the Python wrapper makes arrays
//! contiguous (a copy only when they are not). numpy cannot export ml_dtypes'
//! types (bfloat16, float8_*, int4, ...) through the buffer protocol, so such
//! arrays are read through a uint8 view of the same memory.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

pub struct Bytes {
    buf: PyUntypedBuffer,
}

impl Bytes {
    pub fn get(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<Bytes> {
        let buf = match PyUntypedBuffer::get(obj) {
            Ok(buf) => buf,
            Err(e) => match byte_view(obj, what)? {
                Some(view) => PyUntypedBuffer::get(&view)?,
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "{what} must support the buffer protocol (e.g. a numpy array): {e}"
                    )))
                }
            },
        };
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("{what} must be C-contiguous")));
        }
        if writable && buf.readonly() {
            return Err(PyValueError::new_err(format!("{what} must be writable")));
        }
        Ok(Bytes { buf })
    }

    pub fn len(&self) -> usize {
        self.buf.len_bytes()
    }

    fn range(&self) -> (usize, usize) {
        let start = self.buf.buf_ptr() as usize;
        (start, start + self.len())
    }

    pub fn overlaps(&self, other: &Bytes) -> bool {
        let (a0, a1) = self.range();
        let (b0, b1) = other.range();
        a0 < b1 && b0 < a1
    }

    /// The buffer's bytes.
    ///
    /// # Safety
    /// The caller must hold the GIL for as long as the slice is alive, and
    /// must not run Python code meanwhile that could write to the buffer
    /// (with the GIL held no Python thread runs, so nobody else touches the
    /// memory: the convention of PyO3's buffer API). Never release the GIL
    /// (`py.detach`) while the slice is alive.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: a contiguous buffer of len_bytes bytes, kept alive (and its
        // exporter pinned) while `self.buf` is held; nobody writes to it while
        // the slice lives (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.buf.buf_ptr() as *const u8, self.len()) }
    }

    /// The buffer's bytes, to be written.
    ///
    /// # Safety
    /// As [`Bytes::as_slice`], and the buffer must have been obtained with
    /// `writable = true`, and no other slice of the same memory (from this or
    /// another `Bytes`) may be alive while this one is (check `overlaps`).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        if self.len() == 0 {
            return &mut [];
        }
        debug_assert!(!self.buf.readonly());
        // SAFETY: as in `as_slice`, plus the buffer is writable and nothing
        // else reads or writes these bytes while the slice lives (the
        // caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.buf.buf_ptr() as *mut u8, self.len()) }
    }
}

/// A uint8 view sharing the memory of a numpy array whose dtype numpy
/// cannot export (ml_dtypes' types), or None for other objects.
fn byte_view<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    if !(obj.hasattr("dtype")? && obj.hasattr("view")? && obj.hasattr("flags")?) {
        return Ok(None);
    }
    if !obj.getattr("flags")?.getattr("c_contiguous")?.extract::<bool>()? {
        return Err(PyValueError::new_err(format!("{what} must be C-contiguous")));
    }
    // reshape(-1) of a C-contiguous array is a view (and makes 0-d arrays 1-d,
    // which `view` needs to change the item size).
    obj.call_method1("reshape", (-1,))?.call_method1("view", ("uint8",)).map(Some).map_err(|e| {
        PyTypeError::new_err(format!(
            "{what} (dtype {}) cannot be read as bytes: {e}",
            obj.getattr("dtype").map(|d| d.to_string()).unwrap_or_default()
        ))
    })
}

pub fn check_len(what: &str, got: usize, want: usize) -> PyResult<()> {
    if got != want {
        return Err(PyValueError::new_err(format!("{what} has {got} bytes but the region needs {want} bytes")));
    }
    Ok(())
}
