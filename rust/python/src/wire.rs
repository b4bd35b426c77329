//! The ops' wire contract (`mosaic_rt_ffi::wire`) as `_native` constants,
//! so the Python wrappers build their calls from the one table:
//! `OP_LAYOUTS` ({target: (operands, optional operands, rest, attributes,
//! optional attributes)}, tuples of names; `rest` a description of the
//! variadic operands, "" for none), `REGION_KEYS` ({prefix: (sizes,
//! strides, squeezed, fixed)}), `DYNAMIC_START`, `DYNAMIC_SIZE`, `TAIL_STARTS` and
//! `THEN_WAIT_ATTRS` (bytes, sites); `BITFIELDS` ({packed attribute:
//! ((field, shift, width), ...)}, `wire::BITFIELDS`, from which Python
//! packs by field name) and `unpack_bitfield` (a packed value read back
//! through the handlers' accessors, for the drift test).
use mosaic_rt_ffi::wire;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let layouts = PyDict::new(py);
    for l in wire::LAYOUTS {
        let entry = (
            PyTuple::new(py, l.operands)?,
            PyTuple::new(py, l.optional_operands)?,
            l.rest,
            PyTuple::new(py, l.attrs)?,
            PyTuple::new(py, l.optional_attrs)?,
        );
        layouts.set_item(l.target, entry)?;
    }
    m.add("OP_LAYOUTS", layouts)?;
    let regions = PyDict::new(py);
    for (prefix, r) in wire::REGIONS {
        regions.set_item(prefix, PyTuple::new(py, r.keys())?)?;
    }
    m.add("REGION_KEYS", regions)?;
    m.add("DYNAMIC_START", wire::DYNAMIC_START)?;
    m.add("DYNAMIC_SIZE", wire::DYNAMIC_SIZE)?;
    m.add("TAIL_STARTS", wire::TAIL_STARTS)?;
    m.add("THEN_WAIT_ATTRS", (wire::THEN_WAIT_BYTES, wire::THEN_WAIT_SITES))?;
    let bitfields = PyDict::new(py);
    for b in wire::BITFIELDS {
        let fields = b.fields.iter().map(|f| (f.name, f.shift, f.width));
        bitfields.set_item(b.attr, PyTuple::new(py, fields)?)?;
    }
    m.add("BITFIELDS", bitfields)?;
    m.add_function(wrap_pyfunction!(unpack_bitfield, m)?)?;
    Ok(())
}

/// `{field: value}` of `packed`, a value of packed attribute `attr`, as the
/// handlers read it; a ValueError for an unknown attribute or a value with
/// bits outside its fields.
#[pyfunction]
fn unpack_bitfield<'py>(py: Python<'py>, attr: &str, packed: i64) -> PyResult<Bound<'py, PyDict>> {
    let fields = wire::unpack(attr, packed).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{attr}: not a packed attribute, or {packed} sets bits outside its fields"
        ))
    })?;
    let out = PyDict::new(py);
    for (name, value) in fields {
        out.set_item(name, value)?;
    }
    Ok(out)
}
