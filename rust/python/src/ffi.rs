//! Python side of the XLA FFI layer: hands the handler pointers to Python and
//! exposes the structured first error of failed launches.
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use std::ffi::c_void;
use std::ptr::NonNull;

/// `{target name: PyCapsule}` of every XLA FFI handler, for
/// `jax.ffi.register_ffi_target(name, capsule, platform="cpu")`.
///
/// The capsule's *pointer* is the handler (not its contents: XLA reads the
/// pointer). The handlers live in this extension module, which Python never
/// unloads, so the pointers stay valid.
#[pyfunction]
fn ffi_targets(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for (name, addr) in mosaic_rt_ffi::handlers() {
        let Some(ptr) = NonNull::new(addr as *mut c_void) else {
            return Err(PyRuntimeError::new_err(format!("mosaic_rt: handler {name} has a null address")));
        };
        // SAFETY: `ptr` is an `extern "C"` handler of this module (see above).
        let capsule =
            unsafe { PyCapsule::new_with_pointer(py, ptr, c"mosaic_rt.xla_ffi_handler")? };
        out.set_item(name, capsule)?;
    }
    Ok(out)
}

/// The root cause recorded by a failed FFI call as `[mosaic_rt#n]`:
/// `(python type name, message, device, core)`, or `None` when it has been
/// dropped from the bounded table (the caller then falls back to the text).
#[pyfunction]
fn take_error(n: u64) -> Option<(&'static str, String, Option<u32>, Option<u32>)> {
    mosaic_rt_ffi::recorded_error(n).map(|e| (e.kind.python_type(), e.message, e.device, e.core))
}

/// `(found, count, first reports)` of the most recent launch (or runtime)
/// that ran with race detection, or `None` if there was none.
#[pyfunction]
fn race_results() -> Option<(bool, u64, Vec<String>)> {
    mosaic_rt_core::races::latest().map(|log| (log.found(), log.count(), log.reports()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(race_results, m)?)?;
    m.add_function(wrap_pyfunction!(ffi_targets, m)?)?;
    m.add_function(wrap_pyfunction!(take_error, m)?)?;
    Ok(())
}
