//! `mosaic_rt._native.Runtime`: a thin pyo3 class over the core `Runtime`.
//! Argument checking lives in `args`, error mapping in `errors`; numpy
//! handling (dtypes, allocating results) is in `python/mosaic_rt/runtime.py`.

use std::sync::Arc;
use std::time::Duration;

use mosaic_rt_core::{
    BufferKey, Config, DmaMode, DmaRequest, FillMode, Init, OobReads, RtError, Runtime,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

use crate::args::{sem_kind, sem_kind_name, DTypeArg, Id, Int, RegionArg, Shape, Space};
use crate::bytes::{check_len, Bytes};
use crate::errors::{exception, kind_from_name, OrRaise};

/// Copies at least this big run with the GIL released.
const DETACH_BYTES: usize = 64 * 1024;

#[pyclass(frozen, module = "mosaic_rt._native", name = "Runtime")]
pub struct PyRuntime {
    rt: Arc<Runtime>,
}

fn timeout_arg(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s == f64::INFINITY => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s).map(Some).map_err(|_| {
            PyValueError::new_err(format!(
                "wait_timeout must be None or seconds >= 0, got {s}"
            ))
        }),
    }
}

fn product(shape: &[usize]) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| PyValueError::new_err(format!("shape {shape:?} is too large")))
}

impl PyRuntime {
    /// The key of buffer (space, id) as seen from (device, core).
    fn key(
        &self,
        py: Python<'_>,
        device: u32,
        core: u32,
        space: Space,
        id: u32,
    ) -> PyResult<BufferKey> {
        self.rt
            .topology()
            .check(device, core)
            .map_err(|e| e.at(device, core))
            .or_raise(py)?;
        let core = if space.0.is_shared_by_cores() {
            0
        } else {
            core
        };
        Ok(BufferKey {
            space: space.0,
            id,
            device,
            core,
        })
    }

    /// Bytes a load/store of `region` moves.
    fn region_bytes(&self, py: Python<'_>, key: BufferKey, region: &RegionArg) -> PyResult<usize> {
        let info = self.rt.buffer_info(key).or_raise(py)?;
        let shape = self.rt.region_shape(key, &region.0).or_raise(py)?;
        product(&shape)?
            .checked_mul(info.dtype.itemsize())
            .ok_or_else(|| PyValueError::new_err("region too large"))
    }

    /// Runs `f` with the GIL released when the work is big or may block.
    fn maybe_detach<T: Send>(py: Python<'_>, detach: bool, f: impl FnOnce() -> T + Send) -> T {
        if detach {
            py.detach(f)
        } else {
            f()
        }
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
                        detect_races=false))]
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
    ) -> PyResult<Self> {
        let config = Config {
            num_devices: num_devices.0,
            cores_per_device: cores_per_device.0,
            dma_mode: DmaMode::parse(dma_execution_mode).or_raise(py)?,
            oob_reads: OobReads::parse(out_of_bounds_reads).or_raise(py)?,
            fill: FillMode::parse(uninitialized_memory).or_raise(py)?,
            wait_timeout: timeout_arg(wait_timeout)?,
            detect_races,
            // Python threads park: spinning would hold a CPU the GIL holder needs.
            spin_before_park: None,
        };
        Ok(PyRuntime {
            rt: Arc::new(Runtime::new(config).or_raise(py)?),
        })
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
        match self.rt.config().dma_mode {
            DmaMode::Eager => "eager",
            DmaMode::OnWait => "on_wait",
        }
    }

    #[getter]
    fn out_of_bounds_reads(&self) -> &'static str {
        match self.rt.config().oob_reads {
            OobReads::Raise => "raise",
            OobReads::Uninitialized => "uninitialized",
        }
    }

    #[getter]
    fn uninitialized_memory(&self) -> &'static str {
        match self.rt.config().fill {
            FillMode::Nan => "nan",
            FillMode::Zero => "zero",
        }
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
            c.wait_timeout
                .map_or("None".to_string(), |d| d.as_secs_f64().to_string())
        )
    }

    // ------------------------------------------------------------ memory

    /// Allocates a buffer; `data` (C-order bytes of `logical_shape`) or the fill value.
    #[pyo3(signature = (device, core, space, dtype, shape, logical_shape=None, data=None))]
    #[allow(clippy::too_many_arguments)]
    fn allocate_buffer(
        &self,
        py: Python<'_>,
        device: Id,
        core: Option<Id>,
        space: Space,
        dtype: DTypeArg,
        shape: Shape,
        logical_shape: Option<Shape>,
        data: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
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
            Some(d) => Init::Bytes(d.as_slice()),
            None => Init::Fill,
        };
        let rt = &self.rt;
        let big = product(&shape.0)?.saturating_mul(dtype.itemsize()) >= DETACH_BYTES;
        Self::maybe_detach(py, big, || {
            rt.allocate_buffer(
                device.0,
                core.map(|c| c.0),
                space.0,
                dtype,
                &shape.0,
                logical,
                init,
            )
        })
        .or_raise(py)
    }

    fn free_buffer(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
    ) -> PyResult<()> {
        self.rt
            .free_buffer(device.0, core.0, space.0, id.0)
            .or_raise(py)
    }

    /// (dtype name, allocated shape, logical shape, reference count).
    fn buffer_info(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
    ) -> PyResult<(&'static str, Vec<usize>, Vec<usize>, u32)> {
        let key = self.key(py, device.0, core.0, space, id.0)?;
        let info = self.rt.buffer_info(key).or_raise(py)?;
        Ok((
            info.dtype.name(),
            info.shape,
            info.logical_shape,
            info.ref_count,
        ))
    }

    /// The whole (allocated) content as a bytearray.
    fn buffer_content<'py>(
        &self,
        py: Python<'py>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
    ) -> PyResult<Bound<'py, PyByteArray>> {
        let key = self.key(py, device.0, core.0, space, id.0)?;
        let bytes = self.rt.buffer_bytes(key).or_raise(py)?;
        Ok(PyByteArray::new(py, &bytes))
    }

    /// (dtype name, shape) of what a load of `region` returns.
    #[pyo3(signature = (device, core, space, id, region=RegionArg(Default::default())))]
    fn region_layout(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
        region: RegionArg,
    ) -> PyResult<(&'static str, Vec<usize>)> {
        let key = self.key(py, device.0, core.0, space, id.0)?;
        let info = self.rt.buffer_info(key).or_raise(py)?;
        let shape = self.rt.region_shape(key, &region.0).or_raise(py)?;
        Ok((info.dtype.name(), shape))
    }

    /// Reads `region` into `out` (writable, C-contiguous, exactly the region's bytes).
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
        region: RegionArg,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = self.key(py, device.0, core.0, Space(space.0), id.0)?;
        let want = self.region_bytes(py, key, &region)?;
        let out = Bytes::get(out, "out", true)?;
        check_len("out", out.len(), want)?;
        let dst = out.as_mut_slice();
        let rt = &self.rt;
        Self::maybe_detach(py, want >= DETACH_BYTES, || {
            rt.load(device.0, core.0, space.0, id.0, &region.0, dst)
        })
        .or_raise(py)
    }

    /// Writes `data` (C-contiguous, exactly the region's bytes) into `region`.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
        region: RegionArg,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = self.key(py, device.0, core.0, Space(space.0), id.0)?;
        let want = self.region_bytes(py, key, &region)?;
        let data = Bytes::get(data, "data", false)?;
        check_len("data", data.len(), want)?;
        let src = data.as_slice();
        let rt = &self.rt;
        Self::maybe_detach(py, want >= DETACH_BYTES, || {
            rt.store(device.0, core.0, space.0, id.0, &region.0, src)
        })
        .or_raise(py)
    }

    /// Writes `data` where `mask` (one byte per element) is set and puts the
    /// previous values into `out`.
    #[pyo3(signature = (device, core, space, id, region, data, out, mask=None))]
    #[allow(clippy::too_many_arguments)]
    fn swap(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        space: Space,
        id: Id,
        region: RegionArg,
        data: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        mask: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let key = self.key(py, device.0, core.0, Space(space.0), id.0)?;
        let want = self.region_bytes(py, key, &region)?;
        let data = Bytes::get(data, "data", false)?;
        let out = Bytes::get(out, "out", true)?;
        check_len("data", data.len(), want)?;
        check_len("out", out.len(), want)?;
        if out.overlaps(&data) {
            return Err(PyValueError::new_err("out must not share memory with data"));
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
            if out.overlaps(m) {
                return Err(PyValueError::new_err("out must not share memory with mask"));
            }
        }
        let (src, dst) = (data.as_slice(), out.as_mut_slice());
        let mask = mask.as_ref().map(|m| m.as_slice());
        let rt = &self.rt;
        Self::maybe_detach(py, want >= DETACH_BYTES, || {
            rt.swap(device.0, core.0, space.0, id.0, &region.0, src, mask, dst)
        })
        .or_raise(py)
    }

    // -------------------------------------------------------- semaphores

    #[pyo3(signature = (device, core=None, kind="regular", count=Id(1)))]
    fn allocate_semaphores(
        &self,
        py: Python<'_>,
        device: Id,
        core: Option<Id>,
        kind: &str,
        count: Id,
    ) -> PyResult<u32> {
        let kind = sem_kind(kind)?;
        self.rt
            .allocate_semaphores(device.0, core.map(|c| c.0), kind, count.0)
            .or_raise(py)
    }

    fn barrier_semaphore(&self, py: Python<'_>, device: Id, collective_id: Id) -> PyResult<u32> {
        self.rt
            .barrier_semaphore(device.0, collective_id.0)
            .or_raise(py)
    }

    #[pyo3(signature = (device, core, sem, inc=Int(1), target_device=None, target_core=None))]
    #[allow(clippy::too_many_arguments)]
    fn signal(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        sem: Id,
        inc: Int,
        target_device: Option<Id>,
        target_core: Option<Id>,
    ) -> PyResult<()> {
        self.rt
            .semaphore_signal(
                device.0,
                core.0,
                sem.0,
                inc.0,
                target_device.map(|d| d.0),
                target_core.map(|c| c.0),
            )
            .or_raise(py)
    }

    /// Blocks (GIL released) until the count reaches `value`, then subtracts it.
    #[pyo3(signature = (device, core, sem, value=Int(1)))]
    fn wait(&self, py: Python<'_>, device: Id, core: Id, sem: Id, value: Int) -> PyResult<()> {
        let rt = &self.rt;
        py.detach(|| rt.semaphore_wait(device.0, core.0, sem.0, value.0))
            .or_raise(py)
    }

    fn read(&self, py: Python<'_>, device: Id, core: Id, sem: Id) -> PyResult<i64> {
        self.rt.semaphore_read(device.0, core.0, sem.0).or_raise(py)
    }

    /// Starts a DMA; regions as for `load`. `src_sem` and `dst_device` are
    /// both set for a remote copy and both unset for a local one.
    #[pyo3(signature = (device, core, src_space, src_id, src_region, dst_space, dst_id, dst_region,
                        dst_sem, src_sem=None, dst_device=None))]
    #[allow(clippy::too_many_arguments)]
    fn dma_start(
        &self,
        py: Python<'_>,
        device: Id,
        core: Id,
        src_space: Space,
        src_id: Id,
        src_region: RegionArg,
        dst_space: Space,
        dst_id: Id,
        dst_region: RegionArg,
        dst_sem: Id,
        src_sem: Option<Id>,
        dst_device: Option<Id>,
    ) -> PyResult<()> {
        let req = DmaRequest {
            device: device.0,
            core: core.0,
            src_space: src_space.0,
            src_id: src_id.0,
            src_region: src_region.0,
            dst_space: dst_space.0,
            dst_id: dst_id.0,
            dst_region: dst_region.0,
            dst_sem: dst_sem.0,
            src_sem: src_sem.map(|s| s.0),
            dst_device: dst_device.map(|d| d.0),
        };
        let rt = &self.rt;
        py.detach(|| rt.dma_start(&req)).or_raise(py)
    }

    /// Waits (GIL released) for `nbytes` on DMA semaphore `sem`.
    fn dma_wait(&self, py: Python<'_>, device: Id, core: Id, sem: Id, nbytes: Int) -> PyResult<()> {
        let rt = &self.rt;
        py.detach(|| rt.dma_wait(device.0, core.0, sem.0, nbytes.0))
            .or_raise(py)
    }

    /// Rendezvous of all devices (GIL released while waiting).
    fn device_barrier(&self, py: Python<'_>, device: Id) -> PyResult<()> {
        let rt = &self.rt;
        py.detach(|| rt.device_barrier(device.0)).or_raise(py)
    }

    /// Non-zero semaphores as (sem, kind, device, core, count) tuples.
    #[pyo3(signature = (device=None))]
    fn leaks(&self, device: Option<Id>) -> Vec<(u32, &'static str, u32, u32, i64)> {
        self.rt
            .leaks(device.map(|d| d.0))
            .into_iter()
            .map(|l| (l.sem, sem_kind_name(l.kind), l.device, l.core, l.count))
            .collect()
    }

    // ----------------------------------------------------------- failure

    /// Records a failure of (device, core) -- unless one is recorded already --
    /// waking every parked waiter; returns the recorded root cause (not raised).
    #[pyo3(signature = (message, device, core, kind="MosaicRuntimeError"))]
    fn fail<'py>(
        &self,
        py: Python<'py>,
        message: &str,
        device: Id,
        core: Id,
        kind: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let err = RtError::new(kind_from_name(kind)?, message).at(device.0, core.0);
        let root = self.rt.fail(err);
        exception(py, &root)
    }

    /// The recorded root-cause failure as an exception object, or None.
    fn failure<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.rt.failure().map(|e| exception(py, &e)).transpose()
    }
}
