//! Building XLA call frames without XLA, to test and benchmark handlers in
//! Rust (`#[doc(hidden)]`, feature `testing`: not part of the API nor of
//! the release library).

use crate::abi::{self, Api, ApiVersion, ByteSpan, CallFrame};
use std::cell::Cell;
use std::ffi::{c_void, CStr};

thread_local! {
    /// What `XLA_FFI_RunId_Get` reports to fake calls on this thread.
    static RUN_ID: Cell<i64> = const { Cell::new(1) };
}

pub fn set_run_id(id: i64) {
    RUN_ID.with(|r| r.set(id));
}

/// # Safety
/// `args` must point at valid args with a NUL-terminated message.
unsafe extern "C" fn error_create(args: *mut abi::ErrorCreateArgs) -> *mut abi::Error {
    // SAFETY: the function's contract (the handlers pass such args).
    let msg = unsafe { CStr::from_ptr((*args).message) }.to_string_lossy().into_owned();
    Box::into_raw(Box::new(msg)) as *mut abi::Error
}

/// # Safety
/// `args` must point at valid, writable args.
unsafe extern "C" fn run_id_get(args: *mut abi::RunIdGetArgs) -> *mut abi::Error {
    // SAFETY: the function's contract.
    unsafe { (*args).run_id = RUN_ID.with(|r| r.get()) };
    std::ptr::null_mut()
}

/// # Safety
/// `args` must point at valid, writable args.
unsafe extern "C" fn device_ordinal_get(args: *mut abi::DeviceOrdinalGetArgs) -> *mut abi::Error {
    // SAFETY: the function's contract.
    unsafe { (*args).device_ordinal = 0 };
    std::ptr::null_mut()
}

fn fake_api() -> Api {
    Api {
        struct_size: std::mem::size_of::<Api>(),
        extension_start: std::ptr::null_mut(),
        api_version: ApiVersion {
            struct_size: std::mem::size_of::<ApiVersion>(),
            extension_start: std::ptr::null_mut(),
            major_version: abi::API_MAJOR,
            minor_version: abi::API_MINOR,
        },
        internal_api: std::ptr::null(),
        error_create: Some(error_create),
        error_get_message: None,
        error_destroy: None,
        handler_register: None,
        stream_get: None,
        type_register: None,
        execution_context_get: None,
        state_set: None,
        state_get: None,
        device_memory_allocate: None,
        device_memory_free: None,
        thread_pool_schedule: None,
        thread_pool_num_threads: None,
        future_create: None,
        future_set_available: None,
        future_set_error: None,
        run_id_get: Some(run_id_get),
        device_ordinal_get: Some(device_ordinal_get),
    }
}

struct OwnedBuffer {
    raw: Box<abi::FfiBuffer>,
    _dims: Vec<i64>,
    data: Vec<u8>,
}

fn owned_buffer(dtype: i32, dims: &[i64], mut data: Vec<u8>) -> OwnedBuffer {
    let mut dims = dims.to_vec();
    data.reserve(8); // a non-null pointer even when empty
    let raw = Box::new(abi::FfiBuffer {
        struct_size: std::mem::size_of::<abi::FfiBuffer>(),
        extension_start: std::ptr::null_mut(),
        dtype,
        data: data.as_mut_ptr() as *mut c_void,
        rank: dims.len() as i64,
        dims: dims.as_mut_ptr(),
    });
    OwnedBuffer { raw, _dims: dims, data }
}

enum AttrValue {
    Scalar(Box<abi::Scalar>, #[allow(dead_code)] Box<i64>),
    Str(Box<ByteSpan>, #[allow(dead_code)] String),
    Array(Box<abi::Array>, #[allow(dead_code)] Vec<i64>),
}

/// Launch uids of [`begin_single_device`]: distinct within a test process.
static NEXT_TEST_UID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1 << 40);

/// Joins a fresh one-device, one-core launch through `kernel_begin` (eager
/// DMAs, out-of-bounds reads raise, fresh memory filled as `fill`: "zero" or
/// "nan") and returns its handle.
pub fn begin_single_device(fill: &str) -> [u32; 2] {
    let mut c = FakeCall::new()
        .arg_i32(0)
        .arg_i32(0)
        .ret_i32()
        .ret(abi::DT_U32, &[2], 8)
        .attr_i64("uid", NEXT_TEST_UID.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
        .attr_i64("num_devices", 1)
        .attr_i64("num_cores", 1)
        .attr_str("dma_execution_mode", "eager")
        .attr_str("out_of_bounds_reads", "raise")
        .attr_str("uninitialized_memory", fill)
        .attr_i64("wait_timeout_ms", 5000);
    c.call(crate::c_handlers::kernel_begin).expect("kernel_begin of a test launch");
    let b = c.ret_bytes(1);
    [u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u32::from_le_bytes([b[4], b[5], b[6], b[7]])]
}

/// A call's leading operands on core 0 of device 0: token, `handle`,
/// device, core.
pub fn core_call(handle: [u32; 2]) -> FakeCall {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(0).arg_i32(0)
}

/// `c` with the attributes of a whole-buffer region (no leading dimension
/// selected), their names prefixed with `prefix` ("", "src_", "dst_").
pub fn whole_region(c: FakeCall, prefix: &str) -> FakeCall {
    c.attr_i64s(&format!("{prefix}sizes"), &[])
        .attr_i64s(&format!("{prefix}strides"), &[])
        .attr_i64s(&format!("{prefix}squeezed"), &[])
}

/// One call frame with owned operands, results and attributes.
#[derive(Default)]
pub struct FakeCall {
    args: Vec<OwnedBuffer>,
    rets: Vec<OwnedBuffer>,
    attrs: Vec<(Box<ByteSpan>, String, AttrValue)>,
}

impl FakeCall {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn arg(mut self, dtype: i32, dims: &[i64], data: Vec<u8>) -> Self {
        self.args.push(owned_buffer(dtype, dims, data));
        self
    }

    pub fn arg_i32(self, v: i32) -> Self {
        self.arg(abi::DT_S32, &[], v.to_le_bytes().to_vec())
    }

    pub fn arg_i32s(self, v: &[i32]) -> Self {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.arg(abi::DT_S32, &[v.len() as i64], bytes)
    }

    pub fn arg_handle(self, h: [u32; 2]) -> Self {
        let bytes = h.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.arg(abi::DT_U32, &[2], bytes)
    }

    pub fn ret(mut self, dtype: i32, dims: &[i64], nbytes: usize) -> Self {
        self.rets.push(owned_buffer(dtype, dims, vec![0; nbytes]));
        self
    }

    pub fn ret_i32(self) -> Self {
        self.ret(abi::DT_S32, &[], 4)
    }

    fn named(mut self, name: &str, value: AttrValue) -> Self {
        let name = name.to_string();
        let span = Box::new(ByteSpan { ptr: name.as_ptr() as *const _, len: name.len() });
        self.attrs.push((span, name, value));
        self
    }

    pub fn attr_i64(self, name: &str, v: i64) -> Self {
        let mut b = Box::new(v);
        let s = Box::new(abi::Scalar { dtype: abi::DT_S64, value: &mut *b as *mut i64 as *mut c_void });
        self.named(name, AttrValue::Scalar(s, b))
    }

    pub fn attr_str(self, name: &str, v: &str) -> Self {
        let v = v.to_string();
        let s = Box::new(ByteSpan { ptr: v.as_ptr() as *const _, len: v.len() });
        self.named(name, AttrValue::Str(s, v))
    }

    pub fn attr_i64s(self, name: &str, v: &[i64]) -> Self {
        let mut v = v.to_vec();
        let a = Box::new(abi::Array { dtype: abi::DT_S64, size: v.len(), data: v.as_mut_ptr() as *mut c_void });
        self.named(name, AttrValue::Array(a, v))
    }

    /// Makes the data pointer of operand `i` null (robustness tests).
    pub fn null_arg_data(mut self, i: usize) -> Self {
        self.args[i].raw.data = std::ptr::null_mut();
        self
    }

    /// Makes the data pointer of result `i` null (robustness tests).
    pub fn null_ret_data(mut self, i: usize) -> Self {
        self.rets[i].raw.data = std::ptr::null_mut();
        self
    }

    /// Makes the dims pointer of operand `i` null (robustness tests).
    pub fn null_arg_dims(mut self, i: usize) -> Self {
        self.args[i].raw.dims = std::ptr::null_mut();
        self
    }

    /// Bytes of result `i` after a call.
    pub fn ret_bytes(&self, i: usize) -> &[u8] {
        &self.rets[i].data[..]
    }

    pub fn ret_i32_value(&self, i: usize) -> i32 {
        i32::from_le_bytes(self.ret_bytes(i)[..4].try_into().unwrap())
    }

    /// Calls `handler` once and returns the error message, if any.
    pub fn call(&mut self, handler: abi::Handler) -> Result<(), String> {
        let mut prepared = self.prepare();
        prepared.call(handler)
    }

    /// A frame ready for repeated calls (for benchmarks).
    pub fn prepare(&mut self) -> Prepared<'_> {
        self.attrs.sort_by(|a, b| a.1.cmp(&b.1)); // XLA sorts attributes by name
        let mut arg_types = vec![abi::ARG_BUFFER; self.args.len()];
        let mut arg_ptrs: Vec<*mut c_void> =
            self.args.iter_mut().map(|b| &mut *b.raw as *mut abi::FfiBuffer as *mut c_void).collect();
        let mut ret_types = vec![abi::RET_BUFFER; self.rets.len()];
        let mut ret_ptrs: Vec<*mut c_void> =
            self.rets.iter_mut().map(|b| &mut *b.raw as *mut abi::FfiBuffer as *mut c_void).collect();
        let mut attr_types = Vec::new();
        let mut attr_names = Vec::new();
        let mut attr_ptrs = Vec::new();
        for (span, _, value) in self.attrs.iter_mut() {
            attr_names.push(&mut **span as *mut ByteSpan);
            let (ty, ptr) = match value {
                AttrValue::Scalar(s, _) => (abi::ATTR_SCALAR, &mut **s as *mut abi::Scalar as *mut c_void),
                AttrValue::Str(s, _) => (abi::ATTR_STRING, &mut **s as *mut ByteSpan as *mut c_void),
                AttrValue::Array(a, _) => (abi::ATTR_ARRAY, &mut **a as *mut abi::Array as *mut c_void),
            };
            attr_types.push(ty);
            attr_ptrs.push(ptr);
        }
        let api = Box::new(fake_api());
        let frame = CallFrame {
            struct_size: abi::CALL_FRAME_STRUCT_SIZE,
            extension_start: std::ptr::null_mut(),
            api: &*api,
            ctx: std::ptr::null_mut(),
            stage: abi::STAGE_EXECUTE,
            args: abi::Args {
                struct_size: std::mem::size_of::<abi::Args>(),
                extension_start: std::ptr::null_mut(),
                size: arg_ptrs.len() as i64,
                types: arg_types.as_mut_ptr(),
                args: arg_ptrs.as_mut_ptr(),
            },
            rets: abi::Rets {
                struct_size: std::mem::size_of::<abi::Rets>(),
                extension_start: std::ptr::null_mut(),
                size: ret_ptrs.len() as i64,
                types: ret_types.as_mut_ptr(),
                rets: ret_ptrs.as_mut_ptr(),
            },
            attrs: abi::Attrs {
                struct_size: std::mem::size_of::<abi::Attrs>(),
                extension_start: std::ptr::null_mut(),
                size: attr_ptrs.len() as i64,
                types: attr_types.as_mut_ptr(),
                names: attr_names.as_mut_ptr(),
                attrs: attr_ptrs.as_mut_ptr(),
            },
            future: std::ptr::null_mut(),
        };
        Prepared {
            frame,
            _api: api,
            _keep: (arg_types, arg_ptrs, ret_types, ret_ptrs, attr_types, attr_names, attr_ptrs),
            _owner: std::marker::PhantomData,
        }
    }
}

type Keep = (Vec<i32>, Vec<*mut c_void>, Vec<i32>, Vec<*mut c_void>, Vec<i32>, Vec<*mut ByteSpan>, Vec<*mut c_void>);

/// A call frame pointing into a borrowed [`FakeCall`].
pub struct Prepared<'a> {
    pub frame: CallFrame,
    _api: Box<Api>,
    _keep: Keep,
    _owner: std::marker::PhantomData<&'a mut FakeCall>,
}

impl Prepared<'_> {
    pub fn call(&mut self, handler: abi::Handler) -> Result<(), String> {
        // SAFETY: the frame points at live storage owned by `self` / the FakeCall.
        let err = unsafe { handler(&mut self.frame) };
        if err.is_null() {
            Ok(())
        } else {
            // SAFETY: fake errors are boxed Strings (see `error_create`).
            Err(*unsafe { Box::from_raw(err as *mut String) })
        }
    }
}
