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

    /// Runs `body` as op `op` on `frame` (a member of a `batch`): an error
    /// that binds the member to its launch binds this call too.
    /// Its attribute names start with `skip` bytes that are not theirs.
    pub fn run_member(&mut self, frame: &CallFrame, skip: usize, op: &'static str, body: Body) -> Result<()> {
        let mut member = Call { frame: Frame { raw: frame, op, skip, hints: self.frame.hints }, bound: None };
        let result = body(&mut member).map_err(|e| e.at_site(member.site()));
        if member.bound.is_some() {
            self.bound = member.bound;
        }
        result
    }

    /// The op's source site: optional attribute `site` (0: unknown).
    #[inline]
    pub fn site(&self) -> u32 {
        self.frame.attr_i64_opt(crate::wire::SITE).ok().flatten().and_then(|s| u32::try_from(s).ok()).unwrap_or(0)
    }

    /// Makes the op's site the calling thread's current one (what the core
    /// records -- allocations, DMA starts, accesses -- carries it) until the
    /// guard drops. Nothing is touched for an op without a site; the hot
    /// semaphore ops pass their site explicitly instead.
    #[inline]
    pub fn enter_site(&self) -> Option<mosaic_rt_core::site::SiteGuard> {
        match self.site() {
            0 => None,
            s => Some(mosaic_rt_core::site::enter(s)),
        }
    }
}

pub type Body = fn(&mut Call) -> Result<()>;

/// Runs `body` as handler `op` on `frame`.
///
/// # Safety
/// `frame` must be null or the call frame XLA passed to the handler: valid,
/// with the pointers it holds valid (or null), for the whole call.
pub unsafe fn run(frame: *mut CallFrame, op: &'static str, body: Body) -> *mut abi::Error {
    // SAFETY: null or a valid call frame, by this function's contract.
    let Some(raw) = (unsafe { frame.as_ref() }) else {
        return std::ptr::null_mut();
    };
    // Registration-time query: fill in the metadata and succeed; there are
    // no args, and `api` may be NULL.
    // SAFETY: a non-null extension pointer of a valid frame points at an
    // extension header.
    if let Some(ext) = unsafe { raw.extension_start.as_ref() } {
        if ext.type_ == abi::EXTENSION_METADATA {
            let ext = raw.extension_start as *mut abi::MetadataExtension;
            // SAFETY: a header of type METADATA starts an
            // `XLA_FFI_Metadata_Extension`; its non-null `metadata` points at
            // a struct XLA lets us fill in, and nothing else accesses it
            // during this call.
            unsafe {
                let meta = (*ext).metadata;
                if !meta.is_null() {
                    (*meta).api_version.major_version = abi::API_MAJOR;
                    (*meta).api_version.minor_version = abi::API_MINOR;
                    (*meta).traits = 0;
                }
            }
            return std::ptr::null_mut();
        }
    }
    // SAFETY: a non-null `api` of a valid frame is XLA's API table.
    let Some(api) = (unsafe { raw.api.as_ref() }) else {
        // Nothing can be reported without the API table.
        return std::ptr::null_mut();
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| execute(raw, op, body)));
    let message = match outcome {
        Ok(None) => return std::ptr::null_mut(),
        Ok(Some(msg)) => msg,
        Err(_) => format!("[mosaic_rt] MosaicRuntimeError: internal error while reporting a failure of {op}"),
    };
    // SAFETY: `api` is the API table of the current call.
    unsafe { errors::ffi_error(api, &message) }
}

/// Checks the frame, runs the body and turns any failure (error or panic)
/// into the wire message of the launch's root cause.
fn execute(raw: &CallFrame, op: &'static str, body: Body) -> Option<String> {
    crate::frame::with_hints(|hints| execute_with(raw, op, body, hints))
}

fn execute_with(raw: &CallFrame, op: &'static str, body: Body, hints: &crate::frame::Hints) -> Option<String> {
    let mut call = Call { frame: Frame { raw, op, skip: 0, hints }, bound: None };
    let result = if raw.struct_size < abi::CALL_FRAME_STRUCT_SIZE {
        Err(RtError::internal(format!(
            "{op}: XLA call frame too small ({} < {} bytes): incompatible jaxlib",
            raw.struct_size,
            abi::CALL_FRAME_STRUCT_SIZE
        )))
    } else if raw.stage != abi::STAGE_EXECUTE {
        Err(RtError::internal(format!("{op}: unexpected execution stage {}", raw.stage)))
    } else {
        match catch_unwind(AssertUnwindSafe(|| body(&mut call))) {
            Ok(r) => r,
            Err(panic) => {
                Err(RtError::internal(format!("{op} panicked (a bug in mosaic_rt): {}", panic_message(&*panic))))
            }
        }
    };
    let err = result.err()?.at_site(call.site());
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

    /// A handler whose body panics.
    ///
    /// # Safety
    /// As every handler: `frame` is a valid call frame.
    unsafe extern "C" fn panicking(frame: *mut CallFrame) -> *mut abi::Error {
        // SAFETY: called by `FakeCall::call` with a valid frame.
        unsafe { run(frame, "mosaic_rt_test_panic", |_| panic!("deliberate {}", 42)) }
    }

    #[test]
    fn a_panic_becomes_an_ffi_error() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {})); // keep the test output clean
        let e = FakeCall::new().arg_i32(0).ret_i32().call(panicking).unwrap_err();
        std::panic::set_hook(prev);
        assert!(
            e.contains("MosaicRuntimeError: mosaic_rt_test_panic panicked (a bug in mosaic_rt): deliberate 42"),
            "{e}"
        );
    }
}
