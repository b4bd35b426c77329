//! Conversion of Python arguments into the core's types, with clear
//! `ValueError`/`TypeError` messages instead of bare `OverflowError`s.

use mosaic_rt_core::{DType, DimSel, MemorySpace, Region};
use mosaic_rt_wire::WireError;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyString, PyTuple};
use std::str::FromStr;

/// Extracts a Python int as i64, turning overflow into a ValueError.
fn int64(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    obj.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            PyValueError::new_err(format!("integer {obj} is out of range (64-bit signed)"))
        } else {
            e
        }
    })
}

/// A device, core, buffer, semaphore or collective id, or a count: 0..=u32::MAX.
#[derive(Clone, Copy, Debug)]
pub struct Id(pub u32);

impl<'a, 'py> FromPyObject<'a, 'py> for Id {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let v = int64(&obj)?;
        u32::try_from(v)
            .map(Id)
            .map_err(|_| PyValueError::new_err(format!("expected an integer in [0, {}], got {v}", u32::MAX)))
    }
}

/// `v` as a u32 id or count called `what` in the message.
pub fn id_arg(what: &str, v: Int) -> PyResult<u32> {
    u32::try_from(v.0)
        .map_err(|_| PyValueError::new_err(format!("{what} must be an integer in [0, {}], got {}", u32::MAX, v.0)))
}

/// A signed 64-bit count (semaphore values, byte counts).
#[derive(Clone, Copy, Debug)]
pub struct Int(pub i64);

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        int64(&obj).map(Int)
    }
}

/// A shape: a sequence of non-negative ints.
pub struct Shape(pub Vec<usize>);

impl<'a, 'py> FromPyObject<'a, 'py> for Shape {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("a shape must be a sequence of ints, got a str"));
        }
        let mut dims = Vec::new();
        for item in obj.try_iter()? {
            let item = item?;
            let v = int64(&item)?;
            let d = usize::try_from(v)
                .map_err(|_| PyValueError::new_err(format!("shape dimensions must be >= 0, got {v}")))?;
            dims.push(d);
        }
        Ok(Shape(dims))
    }
}

/// An element type: numpy's name (`"float32"`, `"int4"`, `"float8_e4m3fn"`,
/// ...) or anything `numpy.dtype()` accepts (a dtype, a scalar type such as
/// `np.float32` or `ml_dtypes.bfloat16`, a code such as `"f4"`).
pub struct DTypeArg(pub DType);

impl<'a, 'py> FromPyObject<'a, 'py> for DTypeArg {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let given = obj.extract::<&str>().ok();
        if let Some(d) = given.and_then(|name| DType::from_name(name).ok()) {
            return Ok(DTypeArg(d));
        }
        // Let numpy normalise it (ml_dtypes registers its types with numpy).
        let np_dtype = obj.py().import("numpy")?.getattr("dtype")?;
        let name: String = match np_dtype.call1((&*obj,)) {
            Ok(dt) => dt.getattr("name")?.extract()?,
            Err(_) => match given {
                // Not a numpy name either: report the name as given.
                Some(name) => name.to_string(),
                None => {
                    return Err(PyTypeError::new_err(format!(
                        "a dtype is a name such as 'float32' or a numpy dtype, got {}",
                        obj.get_type().name()?
                    )))
                }
            },
        };
        DType::from_name(&name).map(DTypeArg).map_err(|e| {
            let message = match given {
                // Say what numpy made of the name the user gave.
                Some(g) if g != name => {
                    e.message.replacen(&format!("{name:?}"), &format!("{g:?} (numpy dtype {name})"), 1)
                }
                _ => e.message,
            };
            PyValueError::new_err(message)
        })
    }
}

/// A memory space, by stock's name ("vmem", "smem", "hbm", "any", ...) or code.
pub struct Space(pub MemorySpace);

impl<'a, 'py> FromPyObject<'a, 'py> for Space {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(name) = obj.extract::<&str>() {
            let lower = name.to_ascii_lowercase();
            let lower = lower.strip_prefix("memoryspace.").unwrap_or(&lower);
            // Lenient: any case, a `MemorySpace.` prefix, "semaphore".
            let space = match lower {
                "semaphore" => Ok(MemorySpace::Semaphore),
                _ => lower.parse::<MemorySpace>(),
            };
            return space.map(Space).map_err(|_| {
                let names: Vec<&str> = MemorySpace::ALL.iter().map(|s| s.name()).collect();
                PyValueError::new_err(format!(
                    "unknown memory space {name:?}: expected one of {} (or their codes 0-{})",
                    names.join(", "),
                    MemorySpace::ALL.len() - 1
                ))
            });
        }
        if obj.is_instance_of::<PyInt>() {
            let code = int64(&obj)?;
            return MemorySpace::from_code(code).map(Space).map_err(|e| PyValueError::new_err(e.message));
        }
        Err(PyTypeError::new_err(format!(
            "a memory space is a name such as 'vmem' or an int code, got {}",
            obj.get_type().name()?
        )))
    }
}

/// A string argument spelling a wire enum (`"regular"`, `"read"`,
/// `"on_wait"`, ...): its own parser, its error raised as a `ValueError`.
pub fn choice<T: FromStr<Err = WireError>>(name: &str) -> PyResult<T> {
    name.parse().map_err(|e: WireError| PyValueError::new_err(e.message))
}

/// A region: `None` (whole buffer) or a sequence with one entry per leading
/// dimension, each an int (a squeezed index) or `(start, size[, stride])`.
pub struct RegionArg(pub Region);

impl<'a, 'py> FromPyObject<'a, 'py> for RegionArg {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.is_none() {
            return Ok(RegionArg(Region::full()));
        }
        if !(obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>()) {
            return Err(PyTypeError::new_err(format!(
                "a region is None or a tuple/list of per-dimension entries, got {}",
                obj.get_type().name()?
            )));
        }
        let mut dims = Vec::new();
        for item in obj.try_iter()? {
            dims.push(dim_sel(&item?)?);
        }
        Ok(RegionArg(Region::new(dims)))
    }
}

fn dim_sel(item: &Bound<'_, PyAny>) -> PyResult<DimSel> {
    if item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>() {
        let parts: Vec<Bound<'_, PyAny>> = item.try_iter()?.collect::<PyResult<_>>()?;
        let nums = parts.iter().map(int64).collect::<PyResult<Vec<i64>>>()?;
        return match nums[..] {
            [start, size] => Ok(DimSel::slice(start, size, 1)),
            [start, size, stride] => Ok(DimSel::slice(start, size, stride)),
            _ => Err(PyValueError::new_err(format!(
                "a region entry tuple is (start, size) or (start, size, stride), got {} items",
                nums.len()
            ))),
        };
    }
    if item.hasattr("__index__")? {
        return Ok(DimSel::index(int64(item)?));
    }
    Err(PyTypeError::new_err(format!(
        "a region entry is an int (squeezed index) or a (start, size[, stride]) tuple, got {}",
        item.get_type().name()?
    )))
}
