//! `#[repr(C)]` mirror of the parts of `xla/ffi/api/c_api.h` (API 0.3) that
//! the handlers use. C enums are plain `i32` here: XLA may hand us values a
//! Rust enum could not represent, which would be undefined behaviour.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_void};

pub const API_MAJOR: i32 = 0;
pub const API_MINOR: i32 = 3;

/// `XLA_FFI_CallFrame_STRUCT_SIZE`: offset of `attrs` + its size (not
/// `size_of::<CallFrame>()`, which also counts `future`).
pub const CALL_FRAME_STRUCT_SIZE: usize = 168;

pub const EXTENSION_METADATA: i32 = 1;
pub const STAGE_EXECUTE: i32 = 3;

pub const ERROR_INVALID_ARGUMENT: i32 = 3;
pub const ERROR_INTERNAL: i32 = 13;

pub const ATTR_ARRAY: i32 = 1;
pub const ATTR_DICTIONARY: i32 = 2;
pub const ATTR_SCALAR: i32 = 3;
pub const ATTR_STRING: i32 = 4;

pub const ARG_BUFFER: i32 = 1;
pub const RET_BUFFER: i32 = 1;

// XLA_FFI_DataType values (not contiguous). The same in the headers of
// jaxlib 0.10.2 (API 0.3) and 0.12.0.1 (API 0.5).
pub const DT_INVALID: i32 = 0;
pub const DT_PRED: i32 = 1;
pub const DT_S8: i32 = 2;
pub const DT_S16: i32 = 3;
pub const DT_S32: i32 = 4;
pub const DT_S64: i32 = 5;
pub const DT_U8: i32 = 6;
pub const DT_U16: i32 = 7;
pub const DT_U32: i32 = 8;
pub const DT_U64: i32 = 9;
pub const DT_F16: i32 = 10;
pub const DT_F32: i32 = 11;
pub const DT_F64: i32 = 12;
pub const DT_C64: i32 = 15;
pub const DT_BF16: i32 = 16;
pub const DT_TOKEN: i32 = 17;
pub const DT_C128: i32 = 18;
pub const DT_F8E5M2: i32 = 19;
pub const DT_F8E4M3FN: i32 = 20;
/// Sub-byte types (S1/U1, S2/U2, S4/U4, F4E2M1FN) arrive packed: element i
/// in bits `(i % per_byte) * bits` of byte `i / per_byte`, dense over the
/// whole array (measured on both jaxlib versions).
pub const DT_S4: i32 = 21;
pub const DT_U4: i32 = 22;
pub const DT_F8E4M3B11FNUZ: i32 = 23;
pub const DT_F8E5M2FNUZ: i32 = 24;
pub const DT_F8E4M3FNUZ: i32 = 25;
pub const DT_S2: i32 = 26;
pub const DT_U2: i32 = 27;
pub const DT_F8E4M3: i32 = 28;
pub const DT_F8E3M4: i32 = 29;
pub const DT_S1: i32 = 30;
pub const DT_U1: i32 = 31;
pub const DT_F4E2M1FN: i32 = 32;
pub const DT_F8E8M0FNU: i32 = 33;

#[repr(C)]
pub struct ExtensionBase {
    pub struct_size: usize,
    pub type_: i32,
    pub next: *mut ExtensionBase,
}

#[repr(C)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major_version: i32,
    pub minor_version: i32,
}

#[repr(C)]
pub struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
    pub state_type_id: i64,
}

#[repr(C)]
pub struct MetadataExtension {
    pub extension_base: ExtensionBase,
    pub metadata: *mut Metadata,
}

/// Opaque error owned by XLA.
#[repr(C)]
pub struct Error {
    _private: [u8; 0],
}

#[repr(C)]
pub struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub message: *const c_char,
    pub errc: i32,
}

/// `XLA_FFI_Buffer`: one operand or result of a call.
#[repr(C)]
pub struct FfiBuffer {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dtype: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *mut i64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

#[repr(C)]
pub struct Scalar {
    pub dtype: i32,
    pub value: *mut c_void,
}

#[repr(C)]
pub struct Array {
    pub dtype: i32,
    pub size: usize,
    pub data: *mut c_void,
}

#[repr(C)]
pub struct Args {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut i32,
    pub args: *mut *mut c_void,
}

#[repr(C)]
pub struct Rets {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut i32,
    pub rets: *mut *mut c_void,
}

#[repr(C)]
pub struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *mut i32,
    pub names: *mut *mut ByteSpan,
    pub attrs: *mut *mut c_void,
}

/// Opaque execution context owned by XLA.
#[repr(C)]
pub struct ExecutionContext {
    _private: [u8; 0],
}

#[repr(C)]
pub struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const Api,
    pub ctx: *mut ExecutionContext,
    pub stage: i32,
    pub args: Args,
    pub rets: Rets,
    pub attrs: Attrs,
    pub future: *mut c_void,
}

#[repr(C)]
pub struct RunIdGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut ExecutionContext,
    pub run_id: i64,
}

#[repr(C)]
pub struct DeviceOrdinalGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut ExecutionContext,
    pub device_ordinal: i32,
}

// The function pointer types below are XLA's; calling one is unsafe with
// XLA's contract: a valid, complete args struct (or call frame) for the
// current call.

/// `XLA_FFI_Handler`.
pub type Handler = unsafe extern "C" fn(*mut CallFrame) -> *mut Error;
pub type ErrorCreateFn = unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut Error;
pub type RunIdGetFn = unsafe extern "C" fn(*mut RunIdGetArgs) -> *mut Error;
pub type DeviceOrdinalGetFn = unsafe extern "C" fn(*mut DeviceOrdinalGetArgs) -> *mut Error;
/// Functions of the table we never call, kept only for the layout.
type Unused = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct Api {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api_version: ApiVersion,
    pub internal_api: *const c_void,
    pub error_create: Option<ErrorCreateFn>,
    pub error_get_message: Unused,
    pub error_destroy: Unused,
    pub handler_register: Unused,
    pub stream_get: Unused,
    pub type_register: Unused,
    pub execution_context_get: Unused,
    pub state_set: Unused,
    pub state_get: Unused,
    pub device_memory_allocate: Unused,
    pub device_memory_free: Unused,
    pub thread_pool_schedule: Unused,
    pub thread_pool_num_threads: Unused,
    pub future_create: Unused,
    pub future_set_available: Unused,
    pub future_set_error: Unused,
    pub run_id_get: Option<RunIdGetFn>,
    pub device_ordinal_get: Option<DeviceOrdinalGetFn>,
}

/// `XLA_FFI_Api_STRUCT_SIZE`: we read up to `device_ordinal_get`.
pub const API_STRUCT_SIZE_WITH_DEVICE_ORDINAL: usize = std::mem::size_of::<Api>();

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_the_c_header() {
        // Offsets as computed from c_api.h on x86_64 / aarch64 (LP64).
        assert_eq!(size_of::<FfiBuffer>(), 48);
        assert_eq!(size_of::<Args>(), 40);
        assert_eq!(size_of::<Attrs>(), 48);
        assert_eq!(offset_of!(CallFrame, args), 40);
        assert_eq!(offset_of!(CallFrame, attrs) + size_of::<Attrs>(), CALL_FRAME_STRUCT_SIZE);
        assert_eq!(offset_of!(Metadata, traits), 32);
        assert_eq!(offset_of!(Api, error_create), 48);
        assert_eq!(offset_of!(Api, run_id_get), 48 + 16 * 8);
        assert_eq!(size_of::<Api>(), 48 + 18 * 8);
    }
}
