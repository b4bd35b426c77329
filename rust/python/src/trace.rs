//! Timelines: the trace files kernels wrote (see `mosaic_rt.timeline`).
use pyo3::prelude::*;

/// Trace files written by kernel launches of this process, oldest first.
#[pyfunction]
fn trace_files() -> Vec<String> {
    mosaic_rt_ffi::trace_files_written()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(trace_files, m)?)?;
    Ok(())
}
