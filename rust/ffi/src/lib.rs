//! XLA FFI layer: one C-ABI handler per runtime operation, over
//! `mosaic_rt_core`. No Python, no GIL: XLA's CPU runtime calls these on each
//! simulated device's thread. See `ops` for the operand conventions.
//!
//! May use: `mosaic_rt_core`, `mosaic_rt_programs`, the XLA FFI C ABI (`abi`); no pyo3.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

#[doc(hidden)]
pub mod abi;
mod dispatch;
mod elements;
pub mod errors;
mod frame;
mod launch;
mod ops;
pub mod report_sink;
pub mod sites;
mod spin;
/// The fake XLA API of the crate's own tests and benchmarks (feature
/// `testing`, which only the crate's dev-dependency on itself turns on).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
mod trace_files;
pub mod wire;

/// XLA FFI dtype codes <-> core dtypes.
#[doc(hidden)]
pub use frame::{dtype_to_xla, xla_to_dtype};

/// Declares `extern "C"` handlers and the `handlers()` table.
macro_rules! handlers {
    ($($name:ident => $body:path),* $(,)?) => {
        /// The `extern "C"` handlers (also callable directly in Rust tests).
        pub mod c_handlers {
            $(
                /// XLA FFI handler (`XLA_FFI_Handler`).
                ///
                /// # Safety
                /// Called by XLA with a valid call frame.
                pub unsafe extern "C" fn $name(
                    frame: *mut crate::abi::CallFrame,
                ) -> *mut crate::abi::Error {
                    // SAFETY: `frame` is the call frame XLA passed us (this
                    // function's own contract).
                    unsafe { crate::dispatch::run(frame, concat!("mosaic_rt_", stringify!($name)), $body) }
                }
            )*
        }

        /// (target name, handler address) of every op, names prefixed `mosaic_rt_`.
        pub fn handlers() -> Vec<(&'static str, usize)> {
            vec![$((concat!("mosaic_rt_", stringify!($name)), c_handlers::$name as crate::abi::Handler as usize)),*]
        }
    };
}

handlers! {
    kernel_begin => crate::ops::kernel::kernel_begin,
    launch_begin => crate::ops::launch_begin::launch_begin,
    kernel_end => crate::ops::kernel::kernel_end,
    leak_report => crate::ops::kernel::leak_report,
    pending_reports => crate::ops::kernel::pending_reports,
    core_end => crate::ops::kernel::core_end,
    device_barrier => crate::ops::kernel::device_barrier,
    sync_device_cores => crate::ops::kernel::sync_device_cores,
    launch_info => crate::ops::kernel::launch_info,
    allocate_buffer => crate::ops::memory::allocate_buffer,
    free_buffer => crate::ops::memory::free_buffer,
    load => crate::ops::memory::load,
    store => crate::ops::memory::store,
    swap => crate::ops::memory::swap,
    allocate_semaphores => crate::ops::sem::allocate_semaphores,
    barrier_semaphore => crate::ops::sem::barrier_semaphore,
    semaphore_signal => crate::ops::sem::semaphore_signal,
    semaphore_wait => crate::ops::sem::semaphore_wait,
    semaphore_read => crate::ops::sem::semaphore_read,
    dma_start => crate::ops::dma::dma_start,
    dma_wait => crate::ops::dma::dma_wait,
    copy_block => crate::ops::block_copy::copy_block,
    check_revisit => crate::ops::revisit::check_revisit,
    grid_begin => crate::ops::grid::grid_begin,
    grid_copy_in => crate::ops::grid::grid_copy_in,
    grid_copy_out => crate::ops::grid::grid_copy_out,
    prng_seed => crate::ops::prng::prng_seed,
    wrap_target => crate::ops::ids::wrap_target,
    iota_ids => crate::ops::ids::iota_ids,
    scalar_program => crate::ops::scalar::scalar_program,
    batch => crate::ops::batch::batch,
    prng_random_bits => crate::ops::prng::prng_random_bits,
    grid_step => crate::ops::trace::grid_step,
    vector_program => crate::ops::vector::vector_program,
    threefry2x32 => crate::ops::threefry::threefry2x32,
}

pub use launch::{callback_state, fail_launch};

/// The target names of the ops a `batch` may hold, by op code.
pub fn batch_members() -> impl ExactSizeIterator<Item = &'static str> {
    ops::batch::MEMBERS.iter().map(|(name, _)| *name)
}

/// Limits of one `batch`: (members, operands of a member, results of a
/// member, attributes).
pub const BATCH_LIMITS: (usize, usize, usize, usize) =
    (ops::batch::MAX_MEMBERS, ops::batch::MAX_MEMBER_ARGS, ops::batch::MAX_MEMBER_RETS, ops::batch::MAX_ATTRS);
/// Timelines: trace files written, the JSON of a runtime, site texts.
pub use trace_files::{trace_json, written as trace_files_written};

/// The root cause recorded as `[mosaic_rt#n]`, if still known.
pub fn recorded_error(n: u64) -> Option<mosaic_rt_core::RtError> {
    errors::lookup(n)
}

/// Attaches this process to a multi-process job (see
/// `mosaic_rt_core::remote`): launches spanning processes use `transport`.
pub fn attach_transport(transport: Box<dyn mosaic_rt_core::remote::Transport>) -> mosaic_rt_core::Result<()> {
    launch::registry().attach(transport)
}

/// Stops the multi-process transport (before MPI shuts down at exit).
pub fn detach_transport() {
    launch::registry().detach()
}

/// This process's index in its multi-process job, once attached.
pub fn attached_process() -> Option<u32> {
    launch::registry().process()
}
