//! `mosaic_rt._native.Runtime`: a thin pyo3 class over the core `Runtime`.
//! Argument checking lives in `args`, error mapping in `errors`; numpy
//! handling (dtypes, allocating results) is in `python/mosaic_rt/runtime.py`.

use std::sync::Arc;
use std::time::Duration;

use mosaic_rt_core::{
    timeout_from_secs, Access, BufferKey, BufferSpec, Config, DmaRequest, Init, MemRef, Region, RtError, Runtime,
    SemKind,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

use crate::args::{choice, id_arg, DTypeArg, Id, Int, RegionArg, Shape, Space};
use crate::bytes::{check_len, Bytes};
use crate::errors::{exception, kind_from_name, OrRaise};

/// Copies at least this big run with the GIL released.
const DETACH_BYTES: usize = 64 * 1024;

#[pyclass(frozen, module = "mosaic_rt._native", name = "Runtime")]
pub struct PyRuntime {
    rt: Arc<Runtime>,
}

fn timeout_arg(py: Python<'_>, seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) => timeout_from_secs(s).or_raise(py),
    }
}

fn product(shape: &[usize]) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| PyValueError::new_err(format!("shape {shape:?} is too large")))
}

impl PyRuntime {
    /// A device id argument, range-checked by the core's one check (a plain
    /// `ValueError`).
    fn device(&self, device: Int) -> PyResult<u32> {
        self.rt.topology().device_id(device.0).map_err(|e| PyValueError::new_err(e.message))
    }

    /// A core id argument, range-checked.
    fn core(&self, core: Int) -> PyResult<u32> {
        self.rt.topology().core_id(core.0).map_err(|e| PyValueError::new_err(e.message))
    }

    /// `region` of buffer (space, id) as seen from the (device, core)
    /// arguments, all range-checked.
    fn mem_ref<'r>(&self, device: Int, core: Int, space: &Space, id: Int, region: &'r Region) -> PyResult<MemRef<'r>> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        Ok(MemRef::new(device, core, space.0, id_arg("buffer id", id)?, region))
    }

    /// The key of buffer (space, id) as seen from (device, core).
    fn key_arg(&self, device: Int, core: Int, space: Space, id: Int) -> PyResult<BufferKey> {
        Ok(self.mem_ref(device, core, &space, id, &Region::full())?.key())
    }

    /// Bytes a load/store of `region` moves.
    fn region_bytes(&self, py: Python<'_>, key: BufferKey, region: &RegionArg) -> PyResult<usize> {
        let info = self.rt.buffer_info(key).or_raise(py)?;
        let shape = self.rt.region_shape(key, &region.0).or_raise(py)?;
        product(&shape)?.checked_mul(info.dtype.itemsize()).ok_or_else(|| PyValueError::new_err("region too large"))
    }

    /// Core runtime shared with other native layers (e.g. the FFI handlers).
    pub fn runtime(&self) -> Arc<Runtime> {
        self.rt.clone()
    }
}

#[pymethods]
impl PyRuntime {
    #[new]
    #[pyo3(signature = (num_devices=Id(1), cores_per_device=Id(1), dma_execution_mode="on_wait",
                        out_of_bounds_reads="raise", uninitialized_memory="nan", wait_timeout=Some(120.0),
                        detect_races=false, detect_deadlocks=false, detect_uninitialized=false,
                        trace=false))]
    #[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments
    fn new(
        py: Python<'_>,
        num_devices: Id,
        cores_per_device: Id,
        dma_execution_mode: &str,
        out_of_bounds_reads: &str,
        uninitialized_memory: &str,
        wait_timeout: Option<f64>,
        detect_races: bool,
        detect_deadlocks: bool,
        detect_uninitialized: bool,
        trace: bool,
    ) -> PyResult<Self> {
        let config = Config {
            num_devices: num_devices.0,
            cores_per_device: cores_per_device.0,
            dma_mode: choice(dma_execution_mode)?,
            oob_reads: choice(out_of_bounds_reads)?,
            fill: choice(uninitialized_memory)?,
            wait_timeout: timeout_arg(py, wait_timeout)?,
            detect_races,
            detect_uninitialized,
            trace,
            // Python threads park: spinning would hold a CPU the GIL holder needs.
            spin_before_park: None,
            // Each thread acts as the cores it names: a deadlock is when all
            // of them are blocked (no idle heuristic: every device is there).
            detect_deadlocks,
            deadlock_idle: None,
            ..Config::default()
        };
        Ok(PyRuntime { rt: Arc::new(Runtime::new(config).or_raise(py)?) })
    }

    #[getter]
    fn num_devices(&self) -> u32 {
        self.rt.config().num_devices
    }

    #[getter]
    fn cores_per_device(&self) -> u32 {
        self.rt.config().cores_per_device
    }

    #[getter]
    fn dma_execution_mode(&self) -> &'static str {
        self.rt.config().dma_mode.name()
    }

    #[getter]
    fn out_of_bounds_reads(&self) -> &'static str {
        self.rt.config().oob_reads.name()
    }

    #[getter]
    fn uninitialized_memory(&self) -> &'static str {
        self.rt.config().fill.name()
    }

    #[getter]
    fn detect_uninitialized(&self) -> bool {
        self.rt.config().detect_uninitialized
    }

    #[getter]
    fn wait_timeout(&self) -> Option<f64> {
        self.rt.config().wait_timeout.map(|d| d.as_secs_f64())
    }

    fn __repr__(&self) -> String {
        let c = self.rt.config();
        format!(
            "Runtime(num_devices={}, cores_per_device={}, dma_execution_mode='{}', \
             out_of_bounds_reads='{}', uninitialized_memory='{}', wait_timeout={})",
            c.num_devices,
            c.cores_per_device,
            self.dma_execution_mode(),
            self.out_of_bounds_reads(),
            self.uninitialized_memory(),
            c.wait_timeout.map_or("None".to_string(), |d| d.as_secs_f64().to_string())
        )
    }

    // ------------------------------------------------------------ memory
    //
    // Python buffers handed in by the caller (`data`, `out`, `mask`) are only
    // read or written with the GIL held: another Python thread could touch
    // them otherwise. The GIL is released only around work on memory nobody
    // else can reach: a result bytearray this call has just created.

    /// Allocates a buffer; `data` (C-order bytes of `logical_shape`) or the fill value.
    #[pyo3(signature = (device, core, space, dtype, shape, logical_shape=None, data=None))]
    #[allow(clippy::too_many_arguments)]
    fn allocate_buffer(
        &self,
        py: Python<'_>,
        device: Int,
        core: Option<Int>,
        space: Space,
        dtype: DTypeArg,
        shape: Shape,
        logical_shape: Option<Shape>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let device = self.device(device)?;
        let core = core.map(|c| self.core(c)).transpose()?;
        let dtype = dtype.0;
        let logical = logical_shape.as_ref().map(|s| s.0.as_slice());
        let data = data.map(|d| Bytes::get(d, "data", false)).transpose()?;
        if let Some(d) = &data {
            let want = product(logical.unwrap_or(&shape.0))?
                .checked_mul(dtype.itemsize())
                .ok_or_else(|| PyValueError::new_err("buffer too large"))?;
            check_len("data", d.len(), want)?;
        }
        let init = match &data {
            // SAFETY: the GIL is held until `init` is dropped at the end of
            // this function (no detach below while data is given).
            Some(d) => Init::Bytes(unsafe { d.as_slice() }),
            None => Init::Fill,
        };
        let rt = &self.rt;
        let big = product(&shape.0)?.saturating_mul(dtype.itemsize()) >= DETACH_BYTES;
        let alloc = || {
            rt.allocate_buffer(
                device,
                core,
                BufferSpec { space: space.0, dtype, shape: &shape.0, logical_shape: logical, init },
            )
        };
        // Filling a big buffer with the fill value touches only our memory.
        if big && data.is_none() {
            py.detach(alloc).or_raise(py)
        } else {
            alloc().or_raise(py)
        }
    }

    fn free_buffer(&self, py: Python<'_>, device: Int, core: Int, space: Space, id: Int) -> PyResult<()> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        self.rt.free_buffer(device, core, space.0, id_arg("buffer id", id)?).or_raise(py)
    }

    /// (dtype name, allocated shape, logical shape, reference count).
    fn buffer_info(
        &self,
        py: Python<'_>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
    ) -> PyResult<(&'static str, Vec<usize>, Vec<usize>, u32)> {
        let key = self.key_arg(device, core, space, id)?;
        let info = self.rt.buffer_info(key).or_raise(py)?;
        Ok((info.dtype.name(), info.shape, info.logical_shape, info.ref_count))
    }

    /// The whole (allocated) content as a bytearray.
    fn buffer_content<'py>(
        &self,
        py: Python<'py>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
    ) -> PyResult<Bound<'py, PyByteArray>> {
        let key = self.key_arg(device, core, space, id)?;
        let bytes = self.rt.buffer_bytes(key).or_raise(py)?;
        Ok(PyByteArray::new(py, &bytes))
    }

    /// (dtype name, shape) of what a load of `region` returns. With
    /// `access` ("read", "write" or "swap": an unmasked swap) the region is
    /// first checked as that access would check it (same errors), so callers
    /// can refuse a huge region before allocating room for its value.
    #[pyo3(signature = (device, core, space, id, region=RegionArg(Default::default()), access=None))]
    #[allow(clippy::too_many_arguments)]
    fn region_layout(
        &self,
        py: Python<'_>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
        region: RegionArg,
        access: Option<&str>,
    ) -> PyResult<(&'static str, Vec<usize>)> {
        let r = self.mem_ref(device, core, &space, id, &region.0)?;
        let key = r.key();
        if let Some(access) = access {
            let access: Access = choice(access)?;
            self.rt.check_access(r, access).or_raise(py)?;
        }
        let info = self.rt.buffer_info(key).or_raise(py)?;
        let shape = self.rt.region_shape(key, &region.0).or_raise(py)?;
        Ok((info.dtype.name(), shape))
    }

    /// Reads `region`: into `out` (writable, C-contiguous, exactly the
    /// region's bytes) and returns None, or, without `out`, into a new
    /// bytearray that it returns.
    #[pyo3(signature = (device, core, space, id, region=RegionArg(Default::default()), out=None))]
    #[allow(clippy::too_many_arguments)]
    fn load<'py>(
        &self,
        py: Python<'py>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
        region: RegionArg,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyByteArray>>> {
        let r = self.mem_ref(device, core, &space, id, &region.0)?;
        let key = r.key();
        let want = self.region_bytes(py, key, &region)?;
        let rt = &self.rt;
        let run = |dst: &mut [u8]| rt.load(r, dst);
        match out {
            Some(out) => {
                let out = Bytes::get(out, "out", true)?;
                check_len("out", out.len(), want)?;
                // SAFETY: the GIL is held while `dst` lives (no detach here),
                // and it is the only slice of `out`.
                let dst = unsafe { out.as_mut_slice() };
                run(dst).or_raise(py)?;
                Ok(None)
            }
            None => {
                // Errors before allocating room for a (possibly huge) region.
                self.rt.check_access(r, Access::Load).or_raise(py)?;
                let fresh = PyByteArray::new_with(py, want, |dst| {
                    // Nobody else can reach the new bytearray: copying into
                    // it without the GIL races with nothing.
                    if want >= DETACH_BYTES { py.detach(|| run(dst)) } else { run(dst) }.or_raise(py)
                })?;
                Ok(Some(fresh))
            }
        }
    }

    /// Writes `data` (C-contiguous, exactly the region's bytes) into `region`.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        py: Python<'_>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
        region: RegionArg,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let r = self.mem_ref(device, core, &space, id, &region.0)?;
        let key = r.key();
        let want = self.region_bytes(py, key, &region)?;
        let data = Bytes::get(data, "data", false)?;
        check_len("data", data.len(), want)?;
        // SAFETY: the GIL is held while `src` lives (no detach here).
        let src = unsafe { data.as_slice() };
        self.rt.store(r, src).or_raise(py)
    }

    /// Writes `data` where `mask` (one byte per element) is set and puts the
    /// previous values into `out` (returning None), or, without `out`, into
    /// a new bytearray that it returns.
    #[pyo3(signature = (device, core, space, id, region, data, out=None, mask=None))]
    #[allow(clippy::too_many_arguments)]
    fn swap<'py>(
        &self,
        py: Python<'py>,
        device: Int,
        core: Int,
        space: Space,
        id: Int,
        region: RegionArg,
        data: &Bound<'py, PyAny>,
        out: Option<&Bound<'py, PyAny>>,
        mask: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyByteArray>>> {
        let r = self.mem_ref(device, core, &space, id, &region.0)?;
        let key = r.key();
        let want = self.region_bytes(py, key, &region)?;
        let data = Bytes::get(data, "data", false)?;
        check_len("data", data.len(), want)?;
        let out = out.map(|o| Bytes::get(o, "out", true)).transpose()?;
        if let Some(out) = &out {
            check_len("out", out.len(), want)?;
            if out.overlaps(&data) {
                return Err(PyValueError::new_err("out must not share memory with data"));
            }
        }
        let mask = mask.map(|m| Bytes::get(m, "mask", false)).transpose()?;
        if let Some(m) = &mask {
            let elems = product(&self.rt.region_shape(key, &region.0).or_raise(py)?)?;
            if m.len() != elems {
                return Err(PyValueError::new_err(format!(
                    "mask has {} bytes but the region has {elems} elements (one byte each)",
                    m.len()
                )));
            }
            if out.as_ref().is_some_and(|o| o.overlaps(m)) {
                return Err(PyValueError::new_err("out must not share memory with mask"));
            }
        }
        // SAFETY: the GIL is held while these slices live (no detach in this
        // method: `data` and `mask` are caller buffers).
        let (src, mask) = unsafe { (data.as_slice(), mask.as_ref().map(|m| m.as_slice())) };
        let run = |dst: &mut [u8]| self.rt.swap(r, src, mask, dst);
        match &out {
            Some(out) => {
                // SAFETY: GIL held (as above); the only slice of `out`, which
                // overlaps neither `data` nor `mask` (checked above).
                let dst = unsafe { out.as_mut_slice() };
                run(dst).or_raise(py)?;
                Ok(None)
            }
            None => Ok(Some(PyByteArray::new_with(py, want, |dst| run(dst).or_raise(py))?)),
        }
    }

    // -------------------------------------------------------- semaphores

    #[pyo3(signature = (device, core=None, kind="regular", count=Int(1)))]
    fn allocate_semaphores(
        &self,
        py: Python<'_>,
        device: Int,
        core: Option<Int>,
        kind: &str,
        count: Int,
    ) -> PyResult<u32> {
        let device = self.device(device)?;
        let core = core.map(|c| self.core(c)).transpose()?;
        let kind: SemKind = choice(kind)?;
        let count = id_arg("semaphore count", count)?;
        self.rt.allocate_semaphores(device, core, kind, count).or_raise(py)
    }

    fn barrier_semaphore(&self, py: Python<'_>, device: Int, collective_id: Int) -> PyResult<u32> {
        let device = self.device(device)?;
        self.rt.barrier_semaphore(device, id_arg("collective_id", collective_id)?).or_raise(py)
    }

    #[pyo3(signature = (device, core, sem, inc=Int(1), target_device=None, target_core=None))]
    #[allow(clippy::too_many_arguments)]
    fn signal(
        &self,
        py: Python<'_>,
        device: Int,
        core: Int,
        sem: Int,
        inc: Int,
        target_device: Option<Int>,
        target_core: Option<Int>,
    ) -> PyResult<()> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        let target_device = target_device.map(|d| self.device(d)).transpose()?;
        let target_core = target_core.map(|c| self.core(c)).transpose()?;
        self.rt
            .semaphore_signal(device, core, id_arg("semaphore id", sem)?, inc.0, target_device, target_core)
            .or_raise(py)
    }

    /// Blocks (GIL released) until the count reaches `value`, then subtracts it.
    #[pyo3(signature = (device, core, sem, value=Int(1)))]
    fn wait(&self, py: Python<'_>, device: Int, core: Int, sem: Int, value: Int) -> PyResult<()> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        let sem = id_arg("semaphore id", sem)?;
        let rt = &self.rt;
        py.detach(|| rt.semaphore_wait(device, core, sem, value.0)).or_raise(py)
    }

    fn read(&self, py: Python<'_>, device: Int, core: Int, sem: Int) -> PyResult<i64> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        self.rt.semaphore_read(device, core, id_arg("semaphore id", sem)?).or_raise(py)
    }

    /// Starts the DMA `request` asks for (a `mosaic_rt.ffi.requests.DmaStart`
    /// of `DmaSide`s, read by field name; regions as for `load`). `src_sem`
    /// and `dst_device` are both set for a remote copy and both unset for a
    /// local one.
    fn dma_start(&self, py: Python<'_>, device: Int, core: Int, request: DmaStartArg) -> PyResult<()> {
        let DmaStartArg { src, dst, dst_sem, src_sem, dst_device, dst_core } = request;
        let req = DmaRequest {
            device: self.device(device)?,
            core: self.core(core)?,
            src_space: src.space.0,
            src_id: id_arg("source buffer id", src.id)?,
            src_region: src.region.0,
            dst_space: dst.space.0,
            dst_id: id_arg("destination buffer id", dst.id)?,
            dst_region: dst.region.0,
            dst_sem: id_arg("destination semaphore id", dst_sem)?,
            src_sem: src_sem.map(|s| id_arg("source semaphore id", s)).transpose()?,
            dst_device: dst_device.map(|d| self.device(d)).transpose()?,
            dst_core: dst_core.map(|c| self.core(c)).transpose()?,
        };
        let rt = &self.rt;
        py.detach(|| rt.dma_start(req)).or_raise(py)
    }

    /// Waits (GIL released) for `nbytes` on DMA semaphore `sem`.
    fn dma_wait(&self, py: Python<'_>, device: Int, core: Int, sem: Int, nbytes: Int) -> PyResult<()> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        let sem = id_arg("semaphore id", sem)?;
        let rt = &self.rt;
        py.detach(|| rt.dma_wait(device, core, sem, nbytes.0)).or_raise(py)
    }

    /// Rendezvous of all devices (GIL released while waiting).
    fn device_barrier(&self, py: Python<'_>, device: Int) -> PyResult<()> {
        let device = self.device(device)?;
        let rt = &self.rt;
        py.detach(|| rt.device_barrier(device)).or_raise(py)
    }

    /// Semaphores left non-zero or with DMAs never waited for, as
    /// (sem, kind, device, core, count, pending DMA descriptions) tuples.
    #[pyo3(signature = (device=None))]
    #[allow(clippy::type_complexity)]
    fn leaks(
        &self,
        py: Python<'_>,
        device: Option<Int>,
    ) -> PyResult<Vec<(u32, &'static str, u32, u32, i64, Vec<String>)>> {
        let device = device.map(|d| self.device(d)).transpose()?;
        Ok(self
            .rt
            .leaks(device)
            .or_raise(py)?
            .into_iter()
            .map(|l| (l.sem, l.kind.name(), l.device, l.core, l.count, l.pending_dmas))
            .collect())
    }

    /// Semaphore counter pages (512 counters each) materialised so far.
    fn semaphore_pages_in_use(&self) -> usize {
        self.rt.semaphore_pages_in_use()
    }

    // ----------------------------------------------------------- failure

    /// The timeline so far as Chrome trace-event JSON, or None without
    /// `trace=True`.
    fn trace_json(&self, py: Python<'_>) -> Option<String> {
        let rt = &self.rt;
        py.detach(|| mosaic_rt_ffi::trace_json(rt))
    }

    /// Records a failure of (device, core) -- unless one is recorded already --
    /// waking every parked waiter; returns the recorded root cause (not raised).
    #[pyo3(signature = (message, device, core, kind="MosaicRuntimeError"))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        message: &str,
        device: Int,
        core: Int,
        kind: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (device, core) = (self.device(device)?, self.core(core)?);
        let err = RtError::new(kind_from_name(kind)?, message).at(device, core);
        let root = self.rt.fail(err);
        exception(py, &root)
    }

    /// Device `device`'s program is done: with `detect_deadlocks`, its cores
    /// no longer count as able to signal anyone.
    fn leave(&self, py: Python<'_>, device: Int) -> PyResult<()> {
        let device = self.device(device)?;
        let rt = Arc::clone(&self.rt);
        py.detach(|| rt.leave_device(device)).or_raise(py)
    }

    /// The recorded root-cause failure as an exception object, or None.
    fn failure<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.rt.failure().map(|e| exception(py, &e)).transpose()
    }
}

/// A `DmaStart` request, its fields read by name (`mosaic_rt/ffi/requests.py`);
/// a field's own conversion error reaches the caller as it is.
struct DmaStartArg {
    src: DmaSideArg,
    dst: DmaSideArg,
    dst_sem: Int,
    src_sem: Option<Int>,
    dst_device: Option<Int>,
    dst_core: Option<Int>,
}

impl<'a, 'py> FromPyObject<'a, 'py> for DmaStartArg {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(DmaStartArg {
            src: field(&obj, "src")?,
            dst: field(&obj, "dst")?,
            dst_sem: field(&obj, "dst_sem")?,
            src_sem: field(&obj, "src_sem")?,
            dst_device: field(&obj, "dst_device")?,
            dst_core: field(&obj, "dst_core")?,
        })
    }
}

/// A `DmaSide`: `space`, `id`, `region` (a `RegionSpec`); a view is the
/// interpreter's only.
struct DmaSideArg {
    space: Space,
    id: Int,
    region: RegionArg,
}

impl<'a, 'py> FromPyObject<'a, 'py> for DmaSideArg {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(DmaSideArg { space: field(&obj, "space")?, id: field(&obj, "id")?, region: field(&obj, "region")? })
    }
}

/// Attribute `name` of a request, converted.
fn field<T>(obj: &Borrowed<'_, '_, PyAny>, name: &str) -> PyResult<T>
where
    T: for<'a, 'py> FromPyObject<'a, 'py, Error = PyErr>,
{
    obj.getattr(name)?.extract()
}
