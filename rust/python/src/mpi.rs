//! `mpi_attach` / `mpi_process`: this process joins a multi-process job
//! over the MPI library mpi4py loaded (`mosaic_rt_mpi`); called only by
//! `mosaic_rt.distributed`, never at import.

use crate::errors::OrRaise;
use mosaic_rt_mpi::{MpiSetup, MpiTransport};
use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mpi_attach, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_process, m)?)?;
    m.add_function(wrap_pyfunction!(mpi_detach, m)?)?;
    Ok(())
}

/// Attaches this process to the job: `library` is a loaded object that
/// depends on libmpi (mpi4py's extension), `comm` / `byte` handle words of
/// the communicator and `MPI_BYTE`, `ranks[p]` the MPI rank of process `p`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn mpi_attach(
    py: Python<'_>,
    library: String,
    comm: usize,
    byte: usize,
    any_source: i32,
    status_size: usize,
    process: u32,
    ranks: Vec<i32>,
) -> PyResult<()> {
    let setup = MpiSetup { library, comm, byte, any_source, status_size, process, ranks };
    let transport = MpiTransport::open(setup).or_raise(py)?;
    mosaic_rt_ffi::attach_transport(Box::new(transport)).or_raise(py)
}

/// This process's index in its job, or None before `mpi_attach`.
#[pyfunction]
fn mpi_process() -> Option<u32> {
    mosaic_rt_ffi::attached_process()
}

/// Stops every MPI call of mosaic_rt (registered with atexit by
/// `mosaic_rt.distributed`, to run before mpi4py finalises MPI).
#[pyfunction]
fn mpi_detach(py: Python<'_>) {
    py.detach(mosaic_rt_ffi::detach_transport);
}
