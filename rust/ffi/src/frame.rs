//! Safe views over one `XLA_FFI_CallFrame`: operands, results and attributes,
//! with the checks every handler needs (arity, dtype, rank) turned into clear
//! `ValueError`s instead of crashes.

use crate::abi::{self, CallFrame};
use mosaic_rt_core::{DType, Result, RtError};
use std::ffi::c_void;

/// A validated EXECUTE-stage call frame.
pub struct Frame<'a> {
    pub(crate) raw: &'a CallFrame,
    /// Target name, for messages.
    pub(crate) op: &'static str,
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
        RtError::value(format!(
            "{}: expected {want} operand(s) and {rets} result(s), got {n} and {r}",
            self.op
        ))
    }

    #[inline]
    pub fn arg(&self, i: usize) -> Result<Buf<'a>> {
        let a = &self.raw.args;
        if i >= self.num_args() {
            return Err(self.missing_buffer("operand", i));
        }
        // SAFETY: XLA guarantees `types` and `args` have `size` entries.
        let (ty, ptr) = unsafe { (*a.types.add(i), *a.args.add(i)) };
        self.buffer(ty == abi::ARG_BUFFER, ptr, ("operand", i))
    }

    #[inline]
    pub fn ret(&self, i: usize) -> Result<Buf<'a>> {
        let r = &self.raw.rets;
        if i >= self.num_rets() {
            return Err(self.missing_buffer("result", i));
        }
        // SAFETY: as for `arg`.
        let (ty, ptr) = unsafe { (*r.types.add(i), *r.rets.add(i)) };
        self.buffer(ty == abi::RET_BUFFER, ptr, ("result", i))
    }

    #[inline]
    fn buffer(
        &self,
        is_buffer: bool,
        ptr: *mut c_void,
        what: (&'static str, usize),
    ) -> Result<Buf<'a>> {
        if !is_buffer || ptr.is_null() {
            return Err(self.not_an_array(what));
        }
        // SAFETY: a BUFFER entry points at an `XLA_FFI_Buffer` valid for the call.
        let b = unsafe { &*(ptr as *const abi::Buffer) };
        let dims = if b.rank <= 0 || b.dims.is_null() {
            &[][..]
        } else {
            unsafe { std::slice::from_raw_parts(b.dims, b.rank as usize) }
        };
        Ok(Buf {
            dtype: b.dtype,
            data: b.data,
            dims,
            what,
            op: self.op,
        })
    }

    #[cold]
    fn missing_buffer(&self, what: &str, i: usize) -> RtError {
        RtError::value(format!("{}: missing {what} {i}", self.op))
    }

    #[cold]
    fn not_an_array(&self, what: (&str, usize)) -> RtError {
        RtError::value(format!(
            "{}: {} {} is not an array",
            self.op, what.0, what.1
        ))
    }

    /// Operand `i` if it is an array of `dtype` and `rank` (the hot path:
    /// no `Buf`, no error value built); `None` sends callers to the slow,
    /// descriptive path.
    #[inline(always)]
    fn raw_arg(&self, i: usize, dtype: i32, rank: i64) -> Option<&'a abi::Buffer> {
        let a = &self.raw.args;
        if i >= self.num_args() {
            return None;
        }
        // SAFETY: as in `arg`.
        unsafe {
            if *a.types.add(i) != abi::ARG_BUFFER {
                return None;
            }
            let b = (*a.args.add(i) as *const abi::Buffer).as_ref()?;
            (b.dtype == dtype && b.rank == rank && !b.data.is_null()).then_some(b)
        }
    }

    /// An int32 scalar operand.
    #[inline(always)]
    pub fn arg_i32(&self, i: usize) -> Result<i32> {
        match self.raw_arg(i, abi::DT_S32, 0) {
            // SAFETY: a rank-0 int32 buffer.
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
        // SAFETY: rank 1 checked; the length is checked here.
        unsafe { (*b.dims == 2).then(|| *(b.data as *const [u32; 2])) }
    }

    /// Operand 0 and result 0 are the int32 token; copies it unless XLA
    /// aliased them (it normally does).
    #[inline(always)]
    pub fn forward_token(&self) -> Result<()> {
        let r = &self.raw.rets;
        let ok = self.raw_arg(0, abi::DT_S32, 0).and_then(|a| {
            if self.num_rets() == 0 {
                return None;
            }
            // SAFETY: as in `ret`.
            unsafe {
                if *r.types != abi::RET_BUFFER {
                    return None;
                }
                let b = (*r.rets as *const abi::Buffer).as_ref()?;
                if b.dtype != abi::DT_S32 || b.rank != 0 || b.data.is_null() {
                    return None;
                }
                if a.data != b.data {
                    *(b.data as *mut i32) = *(a.data as *const i32);
                }
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
        Err(RtError::value(format!(
            "{}: bad token operand or result",
            self.op
        )))
    }

    /// The attribute called `name` (attributes arrive sorted by name, but
    /// there are few of them: a linear scan is the cheapest lookup).
    fn find_attr(&self, name: &str) -> Option<(i32, *mut c_void)> {
        let at = &self.raw.attrs;
        for i in 0..at.size.max(0) as usize {
            // SAFETY: XLA guarantees `types`, `names`, `attrs` have `size` entries.
            unsafe {
                let span = &**at.names.add(i);
                let key = std::slice::from_raw_parts(span.ptr as *const u8, span.len);
                if key == name.as_bytes() {
                    return Some((*at.types.add(i), *at.attrs.add(i)));
                }
            }
        }
        None
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
        if ty != abi::ATTR_SCALAR {
            return Err(self.bad_attr(name, "an integer"));
        }
        // SAFETY: a SCALAR attribute points at an `XLA_FFI_Scalar`.
        let s = unsafe { &*(ptr as *const abi::Scalar) };
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

    pub fn attr_i64(&self, name: &str) -> Result<i64> {
        self.attr_i64_opt(name)?.ok_or_else(|| self.missing(name))
    }

    /// An integer attribute that must fit `u32` (ids, counts, codes).
    pub fn attr_u32(&self, name: &str) -> Result<u32> {
        let v = self.attr_i64(name)?;
        u32::try_from(v).map_err(|_| {
            RtError::value(format!(
                "{}: attribute {name:?} must be in [0, 2**32), got {v}",
                self.op
            ))
        })
    }

    pub fn attr_str_opt(&self, name: &str) -> Result<Option<&'a str>> {
        let Some((ty, ptr)) = self.find_attr(name) else {
            return Ok(None);
        };
        if ty != abi::ATTR_STRING {
            return Err(self.bad_attr(name, "a string"));
        }
        // SAFETY: a STRING attribute points at an `XLA_FFI_ByteSpan`.
        let span = unsafe { &*(ptr as *const abi::ByteSpan) };
        let bytes: &'a [u8] = if span.len == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(span.ptr as *const u8, span.len) }
        };
        std::str::from_utf8(bytes)
            .map(Some)
            .map_err(|_| self.bad_attr(name, "UTF-8"))
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
        if ty != abi::ATTR_ARRAY {
            return Err(self.bad_attr(name, "an int64 array"));
        }
        // SAFETY: an ARRAY attribute points at an `XLA_FFI_Array`.
        let a = unsafe { &*(ptr as *const abi::Array) };
        if a.dtype != abi::DT_S64 {
            return Err(self.bad_attr(name, "an int64 array"));
        }
        if a.size == 0 || a.data.is_null() {
            return Ok(Some(&[]));
        }
        Ok(Some(unsafe {
            std::slice::from_raw_parts(a.data as *const i64, a.size)
        }))
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
    fn describe(&self) -> String {
        format!("{}: {} {}", self.op, self.what.0, self.what.1)
    }

    pub fn num_elements(&self) -> usize {
        self.dims.iter().map(|&d| d.max(0) as usize).product()
    }

    pub fn dtype(&self) -> Result<DType> {
        xla_to_dtype(self.dtype).ok_or_else(|| {
            RtError::value(format!(
                "{} has unsupported dtype {}",
                self.describe(),
                xla_dtype_name(self.dtype)
            ))
        })
    }

    /// Bytes of the buffer as XLA lays it out (sub-byte types packed).
    pub fn byte_len(&self) -> Result<usize> {
        Ok(self.dtype()?.packed_len(self.num_elements()))
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
        RtError::value(format!(
            "{} must be {}, got {}",
            self.describe(),
            want.name(),
            xla_dtype_name(self.dtype)
        ))
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
        RtError::value(format!(
            "{} must have rank {rank}, got shape {:?}",
            self.describe(),
            self.dims
        ))
    }

    /// An int32 scalar operand (ids, values).
    #[inline]
    pub fn scalar_i32(&self) -> Result<i32> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(0)?;
        // SAFETY: a rank-0 int32 buffer holds one i32.
        Ok(unsafe { *(self.data as *const i32) })
    }

    /// An int32 vector operand (dynamic slice starts).
    pub fn i32s(&self) -> Result<&'a [i32]> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(1)?;
        let n = self.num_elements();
        if n == 0 {
            return Ok(&[]);
        }
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const i32, n) })
    }

    pub fn bytes(&self) -> Result<&'a [u8]> {
        let n = self.byte_len()?;
        if n == 0 {
            return Ok(&[]);
        }
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const u8, n) })
    }

    /// Bytes of a result buffer, to be filled.
    pub fn bytes_mut(&self) -> Result<&'a mut [u8]> {
        let n = self.byte_len()?;
        if n == 0 {
            return Ok(&mut []);
        }
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut u8, n) })
    }

    /// Writes an int32 scalar result.
    #[inline]
    pub fn write_i32(&self, v: i32) -> Result<()> {
        self.expect_dtype(DType::I32)?;
        self.expect_rank(0)?;
        unsafe { *(self.data as *mut i32) = v };
        Ok(())
    }
}
