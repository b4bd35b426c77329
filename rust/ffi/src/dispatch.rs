//! The common body of every handler: metadata handshake, call-frame checks,
//! panic containment and error reporting.

use crate::abi::{self, CallFrame};
use crate::errors;
use crate::frame::Frame;
use crate::launch;
use mosaic_rt_core::{Result, RtError};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// State of one call: which launch (handle, device) an error must fail.
pub struct Call<'a> {
    pub frame: Frame<'a>,
    bound: Option<(u64, u32)>,
}

impl<'a> Call<'a> {
    /// From here on an error fails launch `handle` and abandons `device`.
    pub fn bind(&mut self, handle: u64, device: u32) {
        self.bound = Some((handle, device));
    }
}

pub type Body = fn(&mut Call) -> Result<()>;

/// Runs `body` as handler `op` on `frame`.
///
/// # Safety
/// `frame` must be the call frame XLA passed to the handler.
pub unsafe fn run(frame: *mut CallFrame, op: &'static str, body: Body) -> *mut abi::Error {
    if frame.is_null() {
        return std::ptr::null_mut();
    }
    let raw = &*frame;
    // Registration-time query: fill in the metadata and succeed; there are
    // no args, and `api` may be NULL.
    if !raw.extension_start.is_null() && (*raw.extension_start).type_ == abi::EXTENSION_METADATA {
        let ext = raw.extension_start as *mut abi::MetadataExtension;
        let meta = (*ext).metadata;
        if !meta.is_null() {
            (*meta).api_version.major_version = abi::API_MAJOR;
            (*meta).api_version.minor_version = abi::API_MINOR;
            (*meta).traits = 0;
        }
        return std::ptr::null_mut();
    }
    if raw.api.is_null() {
        // Nothing can be reported without the API table.
        return std::ptr::null_mut();
    }
    let api = &*raw.api;
    let outcome = catch_unwind(AssertUnwindSafe(|| execute(raw, op, body)));
    let message = match outcome {
        Ok(None) => return std::ptr::null_mut(),
        Ok(Some(msg)) => msg,
        Err(_) => format!(
            "[mosaic_rt] MosaicRuntimeError: internal error while reporting a failure of {op}"
        ),
    };
    errors::ffi_error(api, &message)
}

/// Checks the frame, runs the body and turns any failure (error or panic)
/// into the wire message of the launch's root cause.
fn execute(raw: &CallFrame, op: &'static str, body: Body) -> Option<String> {
    let mut call = Call {
        frame: Frame { raw, op },
        bound: None,
    };
    let result = if raw.struct_size < abi::CALL_FRAME_STRUCT_SIZE {
        Err(RtError::internal(format!(
            "{op}: XLA call frame too small ({} < {} bytes): incompatible jaxlib",
            raw.struct_size,
            abi::CALL_FRAME_STRUCT_SIZE
        )))
    } else if raw.stage != abi::STAGE_EXECUTE {
        Err(RtError::internal(format!(
            "{op}: unexpected execution stage {}",
            raw.stage
        )))
    } else {
        match catch_unwind(AssertUnwindSafe(|| body(&mut call))) {
            Ok(r) => r,
            Err(panic) => Err(RtError::internal(format!(
                "{op} panicked (a bug in mosaic_rt): {}",
                panic_message(&*panic)
            ))),
        }
    };
    let err = result.err()?;
    let root = match call.bound {
        Some((handle, device)) => launch::fail_and_abandon(handle, device, err),
        None => err.root_cause().clone(),
    };
    let n = errors::record(&root);
    Some(errors::wire_message(n, &root))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeCall;

    unsafe extern "C" fn panicking(frame: *mut CallFrame) -> *mut abi::Error {
        run(frame, "mosaic_rt_test_panic", |_| {
            panic!("deliberate {}", 42)
        })
    }

    #[test]
    fn a_panic_becomes_an_ffi_error() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {})); // keep the test output clean
        let e = FakeCall::new()
            .arg_i32(0)
            .ret_i32()
            .call(panicking)
            .unwrap_err();
        std::panic::set_hook(prev);
        assert!(e.contains("MosaicRuntimeError: mosaic_rt_test_panic panicked (a bug in mosaic_rt): deliberate 42"), "{e}");
    }
}
