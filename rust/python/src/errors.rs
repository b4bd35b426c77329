//! Runtime errors -> Python exceptions of the right type.
//!
//! The classes live in `mosaic_rt.errors`; `_from_native` there builds the
//! exception object (with `.root` for aborts), so the mapping is in one place.

use mosaic_rt_core::{ErrorKind, RtError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static FROM_NATIVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The Python exception object for `err` (not raised).
pub fn exception<'py>(py: Python<'py>, err: &RtError) -> PyResult<Bound<'py, PyAny>> {
    let root = match &err.root {
        Some(r) => Some(exception(py, r)?),
        None => None,
    };
    let build = FROM_NATIVE.import(py, "mosaic_rt.errors", "_from_native")?;
    build.call1((err.kind.python_type(), &err.message, err.device, err.core, root))
}

pub fn to_pyerr(py: Python<'_>, err: &RtError) -> PyErr {
    match exception(py, err) {
        Ok(obj) => PyErr::from_value(obj),
        Err(e) => e,
    }
}

/// `result.or_raise(py)?` converts a core error into the right Python exception.
pub trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, RtError> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, &e))
    }
}

pub fn kind_from_name(name: &str) -> PyResult<ErrorKind> {
    ErrorKind::from_python_type(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown error kind {name:?}: expected a name such as 'ValueError', 'IndexError' \
             or 'MosaicRuntimeError'"
        ))
    })
}
