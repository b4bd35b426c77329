//! pyo3 binding. OWNER: binding helper (ffi.rs: FFI helper).
use pyo3::prelude::*;

mod ffi;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    ffi::register(m)?;
    Ok(())
}
