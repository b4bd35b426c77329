//! pyo3 binding (`mosaic_rt._native`): a thin layer over `mosaic_rt_core` and the FFI targets.
//! Kept thin: argument conversion and error mapping; the work is in
//! `mosaic_rt_core`, numpy handling in `python/mosaic_rt/runtime.py`.
//!
//! May use: `mosaic_rt_core`, `mosaic_rt_ffi`, `mosaic_rt_mpi`, `mosaic_rt_programs`, `mosaic_rt_wire`, pyo3.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]
use mosaic_rt_core::{DType, DmaMode, FillMode, LeakPolicy, MemorySpace, OobReads, RacePolicy, SemKind};
use mosaic_rt_programs::scalar::{self, ScalarOp, ScalarType};
use mosaic_rt_programs::vector::{self, VectorType};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

mod args;
mod bytes;
mod errors;
mod ffi;
mod mpi;
mod runtime;
mod trace;
mod wire;

pub use runtime::PyRuntime;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::PyRuntime>()?;
    ffi::register(m)?;
    trace::register(m)?;
    mpi::register(m)?;
    wire::register(m)?;
    constants(m)
}

/// The core's spellings and codes, so Python keeps no table of its own:
/// `DTYPES` ({numpy name: code}, the one dtype table: the program types'
/// codes are these), `SETTINGS` ({launch option: its spellings}, what
/// `kernel_begin` accepts), `MEMORY_SPACES` ({stock name: code}), `SEMAPHORE_KINDS` and
/// `LEAK_POLICIES` (the strings the ops accept), `SCALAR_OPS` and
/// `SCALAR_TYPES` ({name: code} of scalar programs, `mosaic_rt_programs::scalar`),
/// `VECTOR_OPS` and `VECTOR_TYPES` (the same of vector programs,
/// `mosaic_rt_programs::vector`),
/// `BATCH_OPS` (the target names a `batch` call may hold, by op code) and
/// `BATCH_LIMITS` (its members, member operands, member results, attributes).
fn constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let dtypes = PyDict::new(py);
    for d in DType::ALL {
        dtypes.set_item(d.name(), d.code())?;
    }
    m.add("DTYPES", dtypes)?;
    let settings = PyDict::new(py);
    settings.set_item(DmaMode::WHAT, PyTuple::new(py, DmaMode::ALL.map(DmaMode::name))?)?;
    settings.set_item(OobReads::WHAT, PyTuple::new(py, OobReads::ALL.map(OobReads::name))?)?;
    settings.set_item(FillMode::WHAT, PyTuple::new(py, FillMode::ALL.map(FillMode::name))?)?;
    settings.set_item(RacePolicy::WHAT, PyTuple::new(py, RacePolicy::ALL.map(RacePolicy::name))?)?;
    m.add("SETTINGS", settings)?;
    let spaces = PyDict::new(py);
    for s in MemorySpace::ALL {
        spaces.set_item(s.name(), s.code())?;
    }
    m.add("MEMORY_SPACES", spaces)?;
    m.add("SEMAPHORE_KINDS", PyTuple::new(py, SemKind::ALL.iter().map(|k| k.name()))?)?;
    m.add("LEAK_POLICIES", PyTuple::new(py, LeakPolicy::ALL.iter().map(|p| p.name()))?)?;
    let ops = PyDict::new(py);
    for op in ScalarOp::ALL {
        ops.set_item(op.name(), op.code())?;
    }
    m.add("SCALAR_OPS", ops)?;
    let types = PyDict::new(py);
    for t in ScalarType::ALL {
        types.set_item(t.name(), t.code())?;
    }
    m.add("SCALAR_TYPES", types)?;
    m.add("SCALAR_FORMAT", scalar::FORMAT)?;
    m.add("SCALAR_MAX_VALUES", scalar::MAX_VALUES)?;
    let ops = PyDict::new(py);
    for op in vector::VectorOp::ALL {
        ops.set_item(op.name(), op.code())?;
    }
    m.add("VECTOR_OPS", ops)?;
    let types = PyDict::new(py);
    for t in VectorType::ALL {
        types.set_item(t.name(), t.code())?;
    }
    m.add("VECTOR_TYPES", types)?;
    m.add("VECTOR_FORMAT", vector::FORMAT)?;
    m.add("VECTOR_MAX_VALUES", vector::MAX_VALUES)?;
    m.add("BATCH_OPS", PyTuple::new(py, mosaic_rt_ffi::batch_members())?)?;
    m.add("BATCH_LIMITS", mosaic_rt_ffi::BATCH_LIMITS)?;
    Ok(())
}
