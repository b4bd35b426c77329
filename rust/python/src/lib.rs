//! pyo3 binding (`mosaic_rt._native`): a thin layer over `mosaic_rt_core` and the FFI targets.
//! Kept thin: argument conversion and error mapping; the work is in
//! `mosaic_rt_core`, numpy handling in `python/mosaic_rt/runtime.py`.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
use pyo3::prelude::*;

mod args;
mod bytes;
mod errors;
mod ffi;
mod runtime;
mod trace;

pub use runtime::PyRuntime;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::PyRuntime>()?;
    ffi::register(m)?;
    trace::register(m)?;
    Ok(())
}
