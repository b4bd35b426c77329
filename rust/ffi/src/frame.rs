//! Safe views over one `XLA_FFI_CallFrame`: operands, results and attributes,
//! with the checks every handler needs (arity, dtype, rank, null pointers)
//! turned into clear `ValueError`s instead of crashes.
//!
//! Every raw pointer XLA hands us is null-checked before it is read. Result
//! buffers are written through [`Buf::bytes_mut`], an `unsafe fn`: XLA owns
//! that memory and only the caller can know that nothing else aliases it.

use crate::abi::{self, CallFrame};
use mosaic_rt_core::{DType, Result, RtError};
use std::cell::Cell;
use std::ffi::c_void;

/// A validated EXECUTE-stage call frame.
pub struct Frame<'a> {
    pub(crate) raw: &'a CallFrame,
    /// Target name, for messages.
    pub(crate) op: &'static str,
    /// Bytes before each attribute's name proper: a `batch` member's frame
    /// shows the batch's own attribute entries, named `m{k}_{name}` (see
    /// `ops::batch`); 0 for a call of XLA's.
    pub(crate) skip: usize,
    /// This thread's attribute position hints (see `find_attr`).
    pub(crate) hints: &'a Hints,
}

/// One operand or result buffer.
pub struct Buf<'a> {
    pub dtype: i32,
    pub data: *mut c_void,
    pub dims: &'a [i64],
    /// "operand 3" / "result 1", for messages.
    what: (&'static str, usize),
    op: &'static str,
}

impl<'a> Frame<'a> {
    #[inline]
    pub fn num_args(&self) -> usize {
        self.raw.args.size.max(0) as usize
    }

    #[inline]
    pub fn num_rets(&self) -> usize {
        self.raw.rets.size.max(0) as usize
    }

    /// Checks the number of operands (inclusive range) and results.
    #[inline]
    pub fn expect_arity(&self, args: std::ops::RangeInclusive<usize>, rets: usize) -> Result<()> {
        let (n, r) = (self.num_args(), self.num_rets());
        if !args.contains(&n) || r != rets {
            return Err(self.bad_arity(args, rets));
        }
        Ok(())
    }

    #[cold]
    fn bad_arity(&self, args: std::ops::RangeInclusive<usize>, rets: usize) -> RtError {
        let (n, r) = (self.num_args(), self.num_rets());
        let want = if args.start() == args.end() {
            args.start().to_string()
        } else {
            format!("{} to {}", args.start(), args.end())
        };
        RtError::value(format!("{}: expected {want} operand(s) and {rets} result(s), got {n} and {r}", self.op))
    }

    /// (type, pointer) of operand `i`, if it exists and the tables are there.
    #[inline(always)]
    pub(crate) fn arg_entry(&self, i: usize) -> Option<(i32, *mut c_void)> {
        let a = &self.raw.args;
        if i >= self.num_args() || a.types.is_null() || a.args.is_null() {
            return None;
        }
        // SAFETY: XLA guarantees the non-null `types` and `args` arrays have
        // `size` entries, and `i < size`.
        Some(unsafe { (*a.types.add(i), *a.args.add(i)) })
    }

    /// (type, pointer) of result `i`, as `arg_entry`.
    #[inline(always)]
    pub(crate) fn ret_entry(&self, i: usize) -> Option<(i32, *mut c_void)> {
        let r = &self.raw.rets;
        if i >= self.num_rets() || r.types.is_null() || r.rets.is_null() {
            return None;
        }
        // SAFETY: as in `arg_entry`.
        Some(unsafe { (*r.types.add(i), *r.rets.add(i)) })
    }

    #[inline]
    pub fn arg(&self, i: usize) -> Result<Buf<'a>> {
        let (ty, ptr) = self.arg_entry(i).ok_or_else(|| self.missing_buffer("operand", i))?;
        self.buffer(ty == abi::ARG_BUFFER, ptr, ("operand", i))
    }

    #[inline]
    pub fn ret(&self, i: usize) -> Result<Buf<'a>> {
        let (ty, ptr) = self.ret_entry(i).ok_or_else(|| self.missing_buffer("result", i))?;
        self.buffer(ty == abi::RET_BUFFER, ptr, ("result", i))
    }

    #[inline]
    fn buffer(&self, is_buffer: bool, ptr: *mut c_void, what: (&'static str, usize)) -> Result<Buf<'a>> {
        if !is_buffer || ptr.is_null() {
            return Err(self.not_an_array(what));
        }
        // SAFETY: a non-null BUFFER entry points at an `XLA_FFI_Buffer` that
        // lives for the whole call.
        let b = unsafe { &*(ptr as *const abi::FfiBuffer) };
        let dims: &'a [i64] = match b.rank {
            0 => &[],
            r if r > 0 && !b.dims.is_null() => {
                // SAFETY: a non-null `dims` of a buffer of rank r > 0 has r
                // entries, valid for the call.
                unsafe { std::slice::from_raw_parts(b.dims, r as usize) }
            }
            _ => return Err(self.bad_buffer(what, "has a negative rank or no dimensions")),
        };
        if dims.iter().any(|&d| d < 0) {
            return Err(self.bad_buffer(what, "has a negative dimension"));
        }
        let buf = Buf { dtype: b.dtype, data: b.data, dims, what, op: self.op };
        if b.data.is_null() && buf.checked_elements() != Some(0) {
            return Err(self.bad_buffer(what, "has no data (null pointer)"));
        }
        Ok(buf)
    }

    #[cold]
    fn bad_buffer(&self, what: (&str, usize), problem: &str) -> RtError {
        RtError::value(format!("{}: {} {} {problem}", self.op, what.0, what.1))
    }

    /// XLA's API table (the dispatcher checked it is there).
    pub fn api(&self) -> Result<&'a abi::Api> {
        // SAFETY: a non-null `api` of a valid call frame is XLA's API table,
        // valid for the whole call.
        unsafe { self.raw.api.as_ref() }.ok_or_else(|| RtError::internal(format!("{}: no XLA API table", self.op)))
    }

    #[cold]
    fn missing_buffer(&self, what: &str, i: usize) -> RtError {
        RtError::value(format!("{}: missing {what} {i}", self.op))
    }

    #[cold]
    fn not_an_array(&self, what: (&str, usize)) -> RtError {
        RtError::value(format!("{}: {} {} is not an array", self.op, what.0, what.1))
    }

    /// Operand `i` if it is an array of `dtype` and `rank` (the hot path:
    /// no `Buf`, no error value built); `None` sends callers to the slow,
    /// descriptive path.
    #[inline(always)]
    fn raw_arg(&self, i: usize, dtype: i32, rank: i64) -> Option<&'a abi::FfiBuffer> {
        let (ty, ptr) = self.arg_entry(i)?;
        if ty != abi::ARG_BUFFER {
            return None;
        }
        // SAFETY: as in `buffer` (`as_ref` checks for null).
        let b = unsafe { (ptr as *const abi::FfiBuffer).as_ref()? };
        (b.dtype == dtype && b.rank == rank && !b.data.is_null() && (rank == 0 || !b.dims.is_null())).then_some(b)
    }

    /// An int32 scalar operand.
    #[inline(always)]
    pub fn arg_i32(&self, i: usize) -> Result<i32> {
        match self.raw_arg(i, abi::DT_S32, 0) {
            // SAFETY: `raw_arg` checked a rank-0 int32 buffer with non-null
            // data: it holds one readable i32.
            Some(b) => Ok(unsafe { *(b.data as *const i32) }),
            None => self.slow_arg_i32(i),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow_arg_i32(&self, i: usize) -> Result<i32> {
        self.arg(i)?.scalar_i32()
    }

    /// An int32 scalar id operand (>= 0).
    #[inline(always)]
    pub fn arg_id(&self, i: usize, what: &str) -> Result<u32> {
        let v = self.arg_i32(i)?;
        if v < 0 {
            return Err(negative_id(what, v));
        }
        Ok(v as u32)
    }

    /// An int32 scalar id operand where -1 means "not given".
    #[inline(always)]
    pub fn arg_opt_id(&self, i: usize, what: &str) -> Result<Option<u32>> {
        match self.arg_i32(i)? {
            -1 => Ok(None),
            v if v >= 0 => Ok(Some(v as u32)),
            v => Err(negative_opt_id(what, v)),
        }
    }

    /// A `uint32[2]` operand (the launch handle).
    #[inline(always)]
    pub fn arg_u32_pair(&self, i: usize) -> Option<[u32; 2]> {
        let b = self.raw_arg(i, abi::DT_U32, 1)?;
        // SAFETY: `raw_arg` checked a rank-1 uint32 buffer with non-null
        // dims (one entry) and data; with dims[0] == 2 the data holds two u32.
        unsafe { (*b.dims == 2).then(|| *(b.data as *const [u32; 2])) }
    }

    /// Operand 0 and result 0 are the int32 token; copies it unless XLA
    /// aliased them (it normally does).
    #[inline(always)]
    pub fn forward_token(&self) -> Result<()> {
        let ok = self.raw_arg(0, abi::DT_S32, 0).and_then(|a| {
            let (ty, ptr) = self.ret_entry(0)?;
            if ty != abi::RET_BUFFER {
                return None;
            }
            // SAFETY: as in `buffer` (`as_ref` checks for null).
            let b = unsafe { (ptr as *const abi::FfiBuffer).as_ref()? };
            if b.dtype != abi::DT_S32 || b.rank != 0 || b.data.is_null() {
                return None;
            }
            if a.data != b.data {
                // SAFETY: both are rank-0 int32 buffers with non-null data,
                // distinct (checked) and owned by XLA for this call; no
                // reference to either is alive here.
                unsafe { *(b.data as *mut i32) = *(a.data as *const i32) };
            }
            Some(())
        });
        match ok {
            Some(()) => Ok(()),
            None => self.slow_token_error(),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow_token_error(&self) -> Result<()> {
        let (a, r) = (self.arg(0)?, self.ret(0)?);
        a.expect_dtype(DType::I32)?;
        a.expect_rank(0)?;
        r.expect_dtype(DType::I32)?;
        r.expect_rank(0)?;
        Err(RtError::value(format!("{}: bad token operand or result", self.op)))
    }

    #[inline]
    pub fn num_attrs(&self) -> usize {
        let at = &self.raw.attrs;
        if at.types.is_null() || at.names.is_null() || at.attrs.is_null() {
            return 0;
        }
        at.size.max(0) as usize
    }

    /// (type, name, value pointer) of attribute `i`, if it has a name (its
    /// first `skip` bytes left out).
    #[inline(always)]
    pub(crate) fn attr_entry(&self, i: usize) -> Option<(i32, &'a [u8], *mut c_void)> {
        if i >= self.num_attrs() {
            return None;
        }
        let at = &self.raw.attrs;
        // SAFETY: `num_attrs` checked the `types`, `names` and `attrs`
        // arrays non-null; XLA guarantees they have `size` entries, and
        // `i < size`.
        let (ty, span, attr) = unsafe { (*at.types.add(i), *at.names.add(i), *at.attrs.add(i)) };
        // SAFETY: a non-null name is an `XLA_FFI_ByteSpan` valid for the call.
        let span = unsafe { span.as_ref() }?;
        if span.ptr.is_null() {
            return None;
        }
        // SAFETY: a non-null span pointer covers `len` bytes, valid for the call.
        let key = unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) };
        Some((ty, key.get(self.skip..)?, attr))
    }

    /// The attribute called `name`. Every call of an op at one call site
    /// has the same attributes, so the position it was found at last (per
    /// op and name) is tried first -- for an absent attribute, the position
    /// it would sort at, confirmed by its neighbours; otherwise a binary
    /// search, since XLA hands attributes over sorted by name (its own C++
    /// decoding binds them by position in that order; `batch` keeps each
    /// member's in it). Ops look up many attributes on every call, optional
    /// ones mostly absent: this is the hot path.
    fn find_attr(&self, name: &str) -> Option<(i32, *mut c_void)> {
        let slot = hint_slot(self.op, name);
        let guess = usize::from(self.hints.0[slot].get());
        let name = name.as_bytes();
        let n = self.num_attrs();
        let at_guess = match self.attr_entry(guess) {
            Some((ty, key, attr)) => match compare(key, name) {
                std::cmp::Ordering::Equal => return Some((ty, attr)),
                order => Some(order),
            },
            None => None,
        };
        // Absent where it was absent last: it sorts right before `guess`.
        let before_guess = at_guess == Some(std::cmp::Ordering::Greater) || (guess == n && n > 0);
        if before_guess && (guess == 0 || self.attr_entry(guess - 1).is_some_and(|(_, k, _)| compare(k, name).is_lt()))
        {
            return None;
        }
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some((ty, key, attr)) = self.attr_entry(mid) else { return self.scan_attr(name) };
            match compare(key, name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    self.hints.remember(slot, mid);
                    return Some((ty, attr));
                }
            }
        }
        self.hints.remember(slot, lo);
        None
    }

    /// A linear search, for a frame with an unnamed attribute (never from XLA).
    #[cold]
    fn scan_attr(&self, name: &[u8]) -> Option<(i32, *mut c_void)> {
        (0..self.num_attrs())
            .filter_map(|i| self.attr_entry(i))
            .find(|(_, key, _)| *key == name)
            .map(|(ty, _, attr)| (ty, attr))
    }

    fn missing(&self, name: &str) -> RtError {
        RtError::value(format!("{}: missing attribute {name:?}", self.op))
    }

    fn bad_attr(&self, name: &str, want: &str) -> RtError {
        RtError::value(format!("{}: attribute {name:?} must be {want}", self.op))
    }

    pub fn attr_i64_opt(&self, name: &str) -> Result<Option<i64>> {
        let Some((ty, ptr)) = self.find_attr(name) else {
            return Ok(None);
        };
        if ty != abi::ATTR_SCALAR || ptr.is_null() {
            return Err(self.bad_attr(name, "an integer"));
        }
        // SAFETY: a non-null SCALAR attribute points at an `XLA_FFI_Scalar`.
        let s = unsafe { &*(ptr as *const abi::Scalar) };
        if s.value.is_null() {
            return Err(self.bad_attr(name, "an integer"));
        }
        // SAFETY: a non-null scalar value holds one element of `s.dtype`,
        // which selects the type read.
        let v = unsafe {
            match s.dtype {
                abi::DT_S64 => *(s.value as *const i64),
                abi::DT_S32 => *(s.value as *const i32) as i64,
                abi::DT_U32 => *(s.value as *const u32) as i64,
                abi::DT_S8 | abi::DT_PRED => *(s.value as *const i8) as i64,
                _ => return Err(self.bad_attr(name, "an integer")),
            }
        };
        Ok(Some(v))
    }

    /// Several optional integer attributes at once (an attribute of
    /// another type reads as absent).
    pub fn attrs_i64_opt<const N: usize>(&self, names: [&str; N]) -> [Option<i64>; N] {
        names.map(|n| self.find_attr(n).and_then(|(ty, attr)| self.scalar_i64(ty, attr)))
    }

    fn scalar_i64(&self, ty: i32, ptr: *mut c_void) -> Option<i64> {
        if ty != abi::ATTR_SCALAR || ptr.is_null() {
            return None;
        }
        // SAFETY: a non-null SCALAR attribute points at an `XLA_FFI_Scalar`.
        let s = unsafe { &*(ptr as *const abi::Scalar) };
        if s.value.is_null() {
            return None;
        }
        // SAFETY: a non-null scalar value holds one element of `s.dtype`,
        // which selects the type read.
        unsafe {
            Some(match s.dtype {
                abi::DT_S64 => *(s.value as *const i64),
                abi::DT_S32 => *(s.value as *const i32) as i64,
                abi::DT_U32 => *(s.value as *const u32) as i64,
                abi::DT_S8 | abi::DT_PRED => *(s.value as *const i8) as i64,
                _ => return None,
            })
        }
    }

    pub fn attr_i64(&self, name: &str) -> Result<i64> {
        self.attr_i64_opt(name)?.ok_or_else(|| self.missing(name))
    }

    /// An integer attribute that must fit `u32` (ids, counts, codes).
    pub fn attr_u32(&self, name: &str) -> Result<u32> {
        let v = self.attr_i64(name)?;
        u32::try_from(v)
            .map_err(|_| RtError::value(format!("{}: attribute {name:?} must be in [0, 2**32), got {v}", self.op)))
    }

    pub fn attr_str_opt(&self, name: &str) -> Result<Option<&'a str>> {
        let Some((ty, ptr)) = self.find_attr(name) else {
            return Ok(None);
        };
        if ty != abi::ATTR_STRING || ptr.is_null() {
            return Err(self.bad_attr(name, "a string"));
        }
        // SAFETY: a non-null STRING attribute points at an `XLA_FFI_ByteSpan`.
        let span = unsafe { &*(ptr as *const abi::ByteSpan) };
        let bytes: &'a [u8] = if span.len == 0 {
            &[]
        } else if span.ptr.is_null() {
            return Err(self.bad_attr(name, "a string"));
        } else {
            // SAFETY: a non-null span pointer covers `len` bytes, valid for the call.
            unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) }
        };
        std::str::from_utf8(bytes).map(Some).map_err(|_| self.bad_attr(name, "UTF-8"))
    }

    pub fn attr_str(&self, name: &str) -> Result<&'a str> {
        self.attr_str_opt(name)?.ok_or_else(|| self.missing(name))
    }

    /// An int64 array attribute (`np.asarray(..., np.int64)` on the Python side).
    pub fn attr_i64s(&self, name: &str) -> Result<&'a [i64]> {
        self.attr_i64s_opt(name)?.ok_or_else(|| self.missing(name))
    }

    pub fn attr_i64s_opt(&self, name: &str) -> Result<Option<&'a [i64]>> {
        let Some((ty, ptr)) = self.find_attr(name) else {
            return Ok(None);
        };
        if ty != abi::ATTR_ARRAY || ptr.is_null() {
            return Err(self.bad_attr(name, "an int64 array"));
        }
        // SAFETY: a non-null ARRAY attribute points at an `XLA_FFI_Array`.
        let a = unsafe { &*(ptr as *const abi::Array) };
        if a.dtype != abi::DT_S64 {
            return Err(self.bad_attr(name, "an int64 array"));
        }
        if a.size == 0 || a.data.is_null() {
            return Ok(Some(&[]));
        }
        // SAFETY: a non-null S64 array holds `size` i64s, valid for the call.
        Ok(Some(unsafe { std::slice::from_raw_parts(a.data as *const i64, a.size) }))
    }
}

#[cold]
fn negative_id(what: &str, v: i32) -> RtError {
    RtError::value(format!("{what} must be >= 0, got {v}"))
}

#[cold]
fn negative_opt_id(what: &str, v: i32) -> RtError {
    RtError::value(format!("{what} must be >= 0 (or -1 for none), got {v}"))
}

/// Name of an XLA dtype, for messages: ours (numpy's name) when we support
/// it, else XLA's (`S1`, `TOKEN`, ...). jaxlib 0.12 passes float6 arrays
/// as `INVALID`.
pub fn xla_dtype_name(dt: i32) -> String {
    if let Some(d) = xla_to_dtype(dt) {
        return d.name().to_string();
    }
    match dt {
        abi::DT_INVALID => "INVALID (an XLA type without an FFI dtype, such as float6_e2m3fn)".into(),
        abi::DT_TOKEN => "token".into(),
        abi::DT_S1 => "int1".into(),
        abi::DT_U1 => "uint1".into(),
        _ => format!("XLA dtype #{dt}"),
    }
}

/// Our dtype of an `XLA_FFI_DataType` (None: one we do not support).
#[inline]
pub fn xla_to_dtype(dt: i32) -> Option<DType> {
    Some(match dt {
        abi::DT_PRED => DType::Bool,
        abi::DT_S8 => DType::I8,
        abi::DT_S16 => DType::I16,
        abi::DT_S32 => DType::I32,
        abi::DT_S64 => DType::I64,
        abi::DT_U8 => DType::U8,
        abi::DT_U16 => DType::U16,
        abi::DT_U32 => DType::U32,
        abi::DT_U64 => DType::U64,
        abi::DT_F16 => DType::F16,
        abi::DT_BF16 => DType::BF16,
        abi::DT_F32 => DType::F32,
        abi::DT_F64 => DType::F64,
        abi::DT_S4 => DType::I4,
        abi::DT_U4 => DType::U4,
        abi::DT_S2 => DType::I2,
        abi::DT_U2 => DType::U2,
        abi::DT_F4E2M1FN => DType::F4E2M1FN,
        abi::DT_F8E5M2 => DType::F8E5M2,
        abi::DT_F8E4M3FN => DType::F8E4M3FN,
        abi::DT_F8E4M3B11FNUZ => DType::F8E4M3B11FNUZ,
        abi::DT_F8E5M2FNUZ => DType::F8E5M2FNUZ,
        abi::DT_F8E4M3FNUZ => DType::F8E4M3FNUZ,
        abi::DT_F8E4M3 => DType::F8E4M3,
        abi::DT_F8E3M4 => DType::F8E3M4,
        abi::DT_F8E8M0FNU => DType::F8E8M0FNU,
        abi::DT_C64 => DType::C64,
        abi::DT_C128 => DType::C128,
        _ => return None,
    })
}

/// The `XLA_FFI_DataType` of one of our dtypes (the inverse of `xla_to_dtype`).
pub fn dtype_to_xla(d: DType) -> i32 {
    match d {
        DType::Bool => abi::DT_PRED,
        DType::I8 => abi::DT_S8,
        DType::I16 => abi::DT_S16,
        DType::I32 => abi::DT_S32,
        DType::I64 => abi::DT_S64,
        DType::U8 => abi::DT_U8,
        DType::U16 => abi::DT_U16,
        DType::U32 => abi::DT_U32,
        DType::U64 => abi::DT_U64,
        DType::F16 => abi::DT_F16,
        DType::BF16 => abi::DT_BF16,
        DType::F32 => abi::DT_F32,
        DType::F64 => abi::DT_F64,
        DType::I4 => abi::DT_S4,
        DType::U4 => abi::DT_U4,
        DType::I2 => abi::DT_S2,
        DType::U2 => abi::DT_U2,
        DType::F4E2M1FN => abi::DT_F4E2M1FN,
        DType::F8E5M2 => abi::DT_F8E5M2,
        DType::F8E4M3FN => abi::DT_F8E4M3FN,
        DType::F8E4M3B11FNUZ => abi::DT_F8E4M3B11FNUZ,
        DType::F8E5M2FNUZ => abi::DT_F8E5M2FNUZ,
        DType::F8E4M3FNUZ => abi::DT_F8E4M3FNUZ,
        DType::F8E4M3 => abi::DT_F8E4M3,
        DType::F8E3M4 => abi::DT_F8E3M4,
        DType::F8E8M0FNU => abi::DT_F8E8M0FNU,
        DType::C64 => abi::DT_C64,
        DType::C128 => abi::DT_C128,
    }
}

impl<'a> Buf<'a> {
    pub(crate) fn describe(&self) -> String {
        format!("{}: {} {}", self.op, self.what.0, self.what.1)
    }

    /// Element count (dims are checked non-negative when the `Buf` is made).
    fn checked_elements(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
    }

    pub fn num_elements(&self) -> usize {
        self.checked_elements().unwrap_or(usize::MAX)
    }

    pub fn dtype(&self) -> Result<DType> {
        xla_to_dtype(self.dtype).ok_or_else(|| {
            RtError::value(format!("{} has unsupported dtype {}", self.describe(), xla_dtype_name(self.dtype)))
        })
    }

    /// Bytes of the buffer as XLA lays it out (sub-byte types packed).
    pub fn byte_len(&self) -> Result<usize> {
        // XLA packs the sub-byte dtypes: never more than n * itemsize.
        let dtype = self.dtype()?;
        self.checked_elements()
            .filter(|n| n.checked_mul(dtype.itemsize()).is_some())
            .map(|n| dtype.packed_len(n))
            .ok_or_else(|| RtError::value(format!("{} is too large", self.describe())))
    }

    /// Address range of the data, for overlap checks.
    pub fn byte_range(&self) -> Result<std::ops::Range<usize>> {
        let start = self.data as usize;
        Ok(start..start.saturating_add(self.byte_len()?))
    }

    #[inline]
    pub fn expect_dtype(&self, want: DType) -> Result<()> {
        if xla_to_dtype(self.dtype) != Some(want) {
            return Err(self.wrong_dtype(want));
        }
        Ok(())
    }

    #[cold]
    fn wrong_dtype(&self, want: DType) -> RtError {
        RtError::value(format!("{} must be {}, got {}", self.describe(), want.name(), xla_dtype_name(self.dtype)))
    }

    #[inline]
    pub fn expect_rank(&self, rank: usize) -> Result<()> {
        if self.dims.len() != rank {
            return Err(self.wrong_rank(rank));
        }
        Ok(())
    }

    #[cold]
    fn wrong_rank(&self, rank: usize) -> RtError {
        RtError::value(format!("{} must have rank {rank}, got shape {:?}", self.describe(), self.dims))
    }

    /// An int32 scalar operand (ids, values).
    #[inline]
    pub fn scalar_i32(&self) -> Result<i32> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(0)?;
        // SAFETY: a rank-0 int32 buffer (data checked non-null when the
        // `Buf` was made, as it has one element) holds one readable i32.
        Ok(unsafe { *(self.data as *const i32) })
    }

    /// An int32 vector operand (dynamic slice starts).
    pub fn i32s(&self) -> Result<&'a [i32]> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(1)?;
        self.int32_elements()
    }

    /// A region's dynamic starts: an int32 vector, or one int32 scalar for a
    /// region with one dynamic start (the program needs no reshape for it).
    pub fn starts(&self) -> Result<&'a [i32]> {
        if !self.dims.is_empty() {
            self.expect_rank(1)?;
        }
        self.int32_elements()
    }

    /// The elements of an int32 operand of any rank.
    fn int32_elements(&self) -> Result<&'a [i32]> {
        self.expect_dtype(DType::I32)?;
        let n = self.num_elements();
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: an int32 buffer with n > 0 elements has non-null data
        // (checked when the `Buf` was made) holding n i32s, which XLA keeps
        // alive and unchanged during the call (operands are read-only).
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const i32, n) })
    }

    /// Bytes of an operand buffer (read-only for the whole call).
    pub fn bytes(&self) -> Result<&'a [u8]> {
        let n = self.byte_len()?;
        if n == 0 {
            return Ok(&[]);
        }
        // SAFETY: a buffer of n > 0 bytes has non-null data (checked when the
        // `Buf` was made) covering n bytes, alive and unchanged for the call.
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const u8, n) })
    }

    /// Bytes of a result buffer, to be filled.
    ///
    /// # Safety
    /// The returned slice must be the only reference to this memory while it
    /// is alive: call this at most once per result buffer, and only for a
    /// result that no operand slice (from [`Buf::bytes`] / [`Buf::i32s`]) or
    /// other result slice overlaps -- XLA aliases a result with an operand
    /// only when the call declares it (our wrappers alias just the token),
    /// and callers that hold operand slices check [`Buf::byte_range`].
    pub unsafe fn bytes_mut(&self) -> Result<&'a mut [u8]> {
        let n = self.byte_len()?;
        if n == 0 {
            return Ok(&mut []);
        }
        // SAFETY: a buffer of n > 0 bytes has non-null data (checked when the
        // `Buf` was made) covering n writable bytes owned by XLA for the
        // call; exclusivity is the caller's contract (see above).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut u8, n) })
    }

    /// Writes a rank-1 result of exactly `values.len()` 4-byte elements of
    /// `dtype` (C order).
    pub fn write_words(&self, dtype: DType, values: &[[u8; 4]]) -> Result<()> {
        self.expect_dtype(dtype)?;
        self.expect_rank(1)?;
        if self.num_elements() != values.len() || dtype.itemsize() != 4 {
            return Err(RtError::value(format!(
                "{} must have {} elements, got shape {:?}",
                self.describe(),
                values.len(),
                self.dims
            )));
        }
        if values.is_empty() {
            return Ok(());
        }
        // SAFETY: a result of `values.len() * 4 > 0` bytes has non-null data
        // (checked when the `Buf` was made), owned by XLA for the call; the
        // source is a distinct Rust slice, and no slice of this result is
        // alive (results are otherwise written only through `bytes_mut`).
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, self.data as *mut u8, values.len() * 4) };
        Ok(())
    }

    /// Writes an int32 scalar result.
    #[inline]
    pub fn write_i32(&self, v: i32) -> Result<()> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(0)?;
        // SAFETY: a rank-0 int32 buffer has non-null data (checked when the
        // `Buf` was made) for one i32; no slice of a result is held across
        // this write (results are only written through `bytes_mut` elsewhere).
        unsafe { *(self.data as *mut i32) = v };
        Ok(())
    }
}

/// Slots of the per-thread table of attribute positions (see `find_attr`).
const HINT_SLOTS: usize = 256;

/// Per (op, attribute name), hashed: where the attribute was found last.
/// Only a guess, always checked; collisions just cost a search. One table
/// per thread (a shared one has its lines bounce between cores whenever
/// call sites with different positions alternate), reached through the
/// frame: looked up once per call, since a thread-local costs a
/// `__tls_get_addr` call in this shared library.
pub(crate) struct Hints([Cell<u8>; HINT_SLOTS]);

thread_local! {
    static HINTS: Hints = const { Hints([const { Cell::new(0) }; HINT_SLOTS]) };
}

/// Runs `f` with this thread's hints.
pub(crate) fn with_hints<R>(f: impl FnOnce(&Hints) -> R) -> R {
    HINTS.with(f)
}

impl Hints {
    /// Remembers position `at` for slot `slot` (positions past 255 are not
    /// remembered: no op has that many attributes).
    #[inline]
    fn remember(&self, slot: usize, at: usize) {
        if let Ok(at) = u8::try_from(at) {
            self.0[slot].set(at);
        }
    }
}

/// The `HINTS` slot of attribute `name` of op `op`: names and op names are
/// string constants, so their addresses identify them.
#[inline]
fn hint_slot(op: &str, name: &str) -> usize {
    let h = (op.as_ptr() as usize).wrapping_mul(0x9E37_79B9) ^ (name.as_ptr() as usize).wrapping_mul(0x85EB_CA6B);
    (h >> 4) % HINT_SLOTS
}

/// Byte-wise (lexicographic) order of two names, eight bytes at a time:
/// big-endian words compare in byte order. Not `a.cmp(b)`, which calls
/// libc's memcmp, whose setup costs more than comparing a few words; the
/// names of one op share long prefixes (`item_kinds`, `item_flags`, ...).
#[inline]
fn compare(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    let (mut wa, mut wb) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    for (x, y) in (&mut wa).zip(&mut wb) {
        let x = u64::from_be_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_be_bytes(y.try_into().expect("8 bytes"));
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in wa.remainder().iter().zip(wb.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::{compare, Frame};
    use crate::testing::FakeCall;

    /// Each frame's `attr_i64_opt(name)` for `names`, all looked up as one
    /// op (so they share position hints, as a call site's do).
    fn lookups(frames: &[&[&str]], names: &[&str]) -> Vec<Vec<Option<i64>>> {
        frames
            .iter()
            .map(|attrs| {
                let mut c = attrs.iter().enumerate().fold(FakeCall::new(), |c, (i, a)| c.attr_i64(a, i as i64));
                let p = c.prepare();
                super::with_hints(|hints| {
                    let f = Frame { raw: &p.frame, op: "hint_test_op", skip: 0, hints };
                    names.iter().map(|n| f.attr_i64_opt(n).unwrap()).collect()
                })
            })
            .collect()
    }

    #[test]
    fn an_attribute_absent_at_its_remembered_position_is_still_found_elsewhere() {
        // Positions remembered from one frame (found, or absent and where it
        // would sort) must never hide an attribute in the next one.
        let frames: [&[&str]; 6] =
            [&["b", "d"], &["b", "c", "d"], &["a", "b", "d", "e"], &["c"], &[], &["a", "b", "c", "d", "e", "f"]];
        let names = ["a", "c", "e", "z", ""];
        let got = lookups(&frames, &names);
        for (attrs, found) in frames.iter().zip(&got) {
            for (name, v) in names.iter().zip(found) {
                let want = attrs.iter().position(|a| a == name).map(|i| i as i64);
                assert_eq!(*v, want, "{name:?} in {attrs:?}");
            }
        }
        // Twice over: now every hint is one a previous frame left.
        assert_eq!(lookups(&frames, &names), got);
    }

    #[test]
    fn compare_orders_names_as_bytes_do() {
        let names = [
            "",
            "a",
            "b",
            "ab",
            "item_",
            "item_flags",
            "item_kinds",
            "item_kinds2",
            "item_logical",
            "m0_dst_sizes",
            "m0_dst_sizes_",
            "m10_site",
            "m1_site",
            "abcdefgh",
            "abcdefgi",
            "abcdefghi",
            "abcdefgh\u{ff}",
            "\u{7f}\u{80}",
        ];
        for a in names.map(str::as_bytes) {
            for b in names.map(str::as_bytes) {
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}
