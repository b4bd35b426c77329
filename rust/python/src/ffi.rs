//! Python side of the XLA FFI layer: hands the handler pointers to Python and
//! exposes the structured first error of failed launches.
use crate::errors::OrRaise;
use mosaic_rt_core::reports::{self, Detail};
use mosaic_rt_core::RtError;
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
        let capsule = unsafe { PyCapsule::new_with_pointer(py, ptr, c"mosaic_rt.xla_ffi_handler")? };
        out.set_item(name, capsule)?;
    }
    Ok(out)
}

/// The root cause recorded by a failed FFI call as `[mosaic_rt#n]`:
/// `(python type name, message, device, core, key, site)`, where key names
/// the original Python exception when the root cause came from
/// `fail_launch` (else None) and site is the source text of the op that
/// failed (None: unknown); `None` when it has been dropped from the bounded
/// table.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn take_error_ex(n: u64) -> Option<(String, String, Option<u32>, Option<u32>, Option<u64>, Option<String>)> {
    mosaic_rt_ffi::recorded_error(n).map(|e| {
        let key = e.external.as_ref().map(|x| x.0);
        let site = mosaic_rt_ffi::sites::text(e.site);
        (e.type_name().to_string(), e.message, e.device, e.core, key, site)
    })
}

/// The id of a source site's text (`file.py:12:4 (kernel)`), from 1; the
/// same text always gets the same id. Pass it to ops as `site=`.
#[pyfunction]
fn intern_site(text: &str) -> u32 {
    mosaic_rt_ffi::sites::intern(text)
}

/// The text of site `id` (None for 0 or an unknown id).
#[pyfunction]
fn site_text(id: u32) -> Option<String> {
    mosaic_rt_ffi::sites::text(id)
}

fn detail_to_py<'py>(py: Python<'py>, d: &Detail) -> PyResult<Bound<'py, PyAny>> {
    Ok(match d {
        Detail::Int(v) => v.into_pyobject(py)?.into_any(),
        Detail::Str(s) => s.into_pyobject(py)?.into_any(),
        Detail::None => py.None().into_bound(py),
    })
}

/// Drains the queue of "warn" reports (races, leaks, misuse): a list of
/// `(category, text, details, as_warning)` with category "race" | "leak" |
/// "misuse"; `as_warning`: issue it as a Python warning (else as stock
/// reports the same event).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn take_reports(py: Python<'_>) -> PyResult<Vec<(&'static str, String, Bound<'_, PyDict>, bool)>> {
    let mut out = Vec::new();
    for r in reports::take_all() {
        let d = PyDict::new(py);
        for (k, v) in &r.details {
            d.set_item(*k, detail_to_py(py, v)?)?;
        }
        out.push((r.category.name(), r.text, d, r.as_warning));
    }
    Ok(out)
}

/// Reports queued and not yet taken.
#[pyfunction]
fn pending_reports() -> usize {
    reports::pending()
}

/// Fails launch `handle` with a failure from outside mosaic_rt's ops on
/// (device, core): Python exception `exc_key` (see
/// `mosaic_rt.ffi.errors.register_exception`) of type `type_name`. Wakes
/// every waiter of the launch. Returns False if the launch is unknown (it
/// has ended), True otherwise.
#[pyfunction]
fn fail_launch(
    py: Python<'_>,
    handle: u64,
    device: u32,
    core: u32,
    exc_key: u64,
    type_name: &str,
    message: &str,
) -> PyResult<Option<String>> {
    let err = RtError::external(exc_key, type_name, message);
    let root = py.detach(|| mosaic_rt_ffi::fail_launch(handle, device, core, err)).or_raise(py)?;
    // The launch's root cause (this failure, or an earlier one) as the
    // `[mosaic_rt#N]` message the FFI handlers raise, for the caller to
    // raise in its turn.
    Ok(root.map(|r| mosaic_rt_ffi::errors::wire_message(mosaic_rt_ffi::errors::record(&r), &r)))
}

/// Marks (device, core) of launch `handle` as inside (`inside=True`) or out
/// of a user host callback: deadlock detection never fires while a core is
/// inside one.
#[pyfunction]
fn callback_state(py: Python<'_>, handle: u64, device: u32, core: u32, inside: bool) -> PyResult<()> {
    py.detach(|| mosaic_rt_ffi::callback_state(handle, device, core, inside)).or_raise(py)
}

/// `(found, count, first reports)` of the most recent launch (or runtime)
/// that ran with race detection, or `None` if there was none.
#[pyfunction]
fn race_results() -> Option<(bool, u64, Vec<String>)> {
    mosaic_rt_core::latest_race_log().map(|log| (log.found(), log.count(), log.reports()))
}

/// Runtimes alive in the process: launches not yet freed plus
/// `mosaic_rt.Runtime` objects (tests: a finished launch must not stay).
#[pyfunction]
fn live_runtimes() -> usize {
    mosaic_rt_core::live_runtimes()
}

/// Bytes of finished launches' allocations parked for reuse (bounded).
#[pyfunction]
fn pooled_bytes() -> usize {
    mosaic_rt_core::pooled_bytes()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(live_runtimes, m)?)?;
    m.add_function(wrap_pyfunction!(pooled_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(race_results, m)?)?;
    m.add_function(wrap_pyfunction!(ffi_targets, m)?)?;
    m.add_function(wrap_pyfunction!(take_error_ex, m)?)?;
    m.add_function(wrap_pyfunction!(intern_site, m)?)?;
    m.add_function(wrap_pyfunction!(site_text, m)?)?;
    m.add_function(wrap_pyfunction!(take_reports, m)?)?;
    m.add_function(wrap_pyfunction!(pending_reports, m)?)?;
    m.add_function(wrap_pyfunction!(fail_launch, m)?)?;
    m.add_function(wrap_pyfunction!(callback_state, m)?)?;
    mosaic_rt_ffi::report_sink::set(deliver_reports);
    Ok(())
}

/// The report sink of kernel launches (`mosaic_rt_ffi::report_sink`): on
/// the XLA thread ending a device's program, with the GIL (as a host
/// callback would hold it), `mosaic_rt.ffi.reports.deliver_from_launch`
/// issues what is queued in the caller's warning and logging context. An
/// exception it raises (a warning turned into an error by a filter) fails
/// the launch with that exception as root cause. A finalizing interpreter
/// gets nothing (the reports stay queued).
fn deliver_reports(handle: u64, device: u32) -> mosaic_rt_core::Result<()> {
    Python::try_attach(|py| {
        let outcome = py
            .import("mosaic_rt.ffi.reports")
            .and_then(|m| m.call_method1("deliver_from_launch", (handle, device)))
            .and_then(|r| r.extract::<Option<(u64, String, String)>>());
        match outcome {
            Ok(None) => Ok(()),
            Ok(Some((key, type_name, message))) => Err(RtError::external(key, &type_name, message)),
            Err(e) => Err(RtError::internal(format!("delivering reports failed: {e}"))),
        }
    })
    .unwrap_or(Ok(()))
}
