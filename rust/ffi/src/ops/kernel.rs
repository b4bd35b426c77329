//! Launch lifetime: begin, end, leak report, device barrier, launch info.

use super::{device_target, pass_token};
use crate::abi;
use crate::dispatch::Call;
use crate::frame::Frame;
use crate::launch;
use crate::wire::{self, kernel_begin as kb, kernel_end as ke, leak_report as lr};
use mosaic_rt_core::reports::{self, Category, Detail, Report};
use mosaic_rt_core::{site, Config, DType, ErrorKind, LeakPolicy, RacePolicy, Result, RtError};
use std::time::Duration;

/// The XLA run id of the current execution: equal on every device of one
/// execution, different between executions (checked by tests/test_ffi_*).
fn run_id(f: &Frame) -> Result<i64> {
    let get = f.api()?.run_id_get.ok_or_else(|| RtError::internal("XLA_FFI_RunId_Get is missing"))?;
    let mut args = abi::RunIdGetArgs {
        struct_size: std::mem::size_of::<abi::RunIdGetArgs>(),
        extension_start: std::ptr::null_mut(),
        ctx: f.raw.ctx,
        run_id: 0,
    };
    // SAFETY: XLA's `XLA_FFI_RunId_Get` from the call's API table, with a
    // complete args struct for the current call's context.
    let err = unsafe { get(&mut args) };
    if !err.is_null() {
        return Err(RtError::internal("XLA_FFI_RunId_Get failed"));
    }
    Ok(args.run_id)
}

/// The XLA device ordinal the calling program runs on.
fn device_ordinal(f: &Frame) -> Result<i32> {
    let get = f.api()?.device_ordinal_get.ok_or_else(|| RtError::internal("XLA_FFI_DeviceOrdinal_Get is missing"))?;
    let mut args = abi::DeviceOrdinalGetArgs {
        struct_size: std::mem::size_of::<abi::DeviceOrdinalGetArgs>(),
        extension_start: std::ptr::null_mut(),
        ctx: f.raw.ctx,
        device_ordinal: 0,
    };
    // SAFETY: XLA's `XLA_FFI_DeviceOrdinal_Get` from the call's API table,
    // with a complete args struct for the current call's context.
    let err = unsafe { get(&mut args) };
    if !err.is_null() {
        return Err(RtError::internal("XLA_FFI_DeviceOrdinal_Get failed"));
    }
    Ok(args.device_ordinal)
}

fn config_from_attrs(f: &Frame) -> Result<Config> {
    let timeout_ms = f.attr_i64(kb::attr::wait_timeout_ms)?;
    Ok(Config {
        num_devices: f.attr_u32(kb::attr::num_devices)?,
        cores_per_device: f.attr_u32(kb::attr::num_cores)?,
        dma_mode: f.attr_str(kb::attr::dma_execution_mode)?.parse()?,
        oob_reads: f.attr_str(kb::attr::out_of_bounds_reads)?.parse()?,
        fill: f.attr_str(kb::attr::uninitialized_memory)?.parse()?,
        // <= 0: no timeout.
        wait_timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms as u64)),
        // Optional (older callers do not pass it); any non-zero S64 turns it on.
        detect_races: f.attr_i64_opt(kb::attr::detect_races)?.is_some_and(|v| v != 0),
        detect_uninitialized: f.attr_i64_opt(kb::attr::detect_uninitialized)?.is_some_and(|v| v != 0),
        trace: f.attr_str_opt(kb::attr::trace_path)?.is_some_and(|p| !p.is_empty()),
        spin_before_park: crate::spin::policy(f.attr_u32(kb::attr::num_devices)?, f.attr_u32(kb::attr::num_cores)?),
        // Optional: race policy (default: stock's print).
        on_race: match f.attr_str_opt(kb::attr::on_race)? {
            Some(p) => p.parse()?,
            None => RacePolicy::Print,
        },
        // Optional: reports as Python warnings unless 0.
        report_as_warnings: f.attr_i64_opt(kb::attr::report_as_warnings)?.is_none_or(|v| v != 0),
        // Optional: on unless 0.
        detect_deadlocks: f.attr_i64_opt(kb::attr::detect_deadlocks)?.is_none_or(|v| v != 0),
        // Optional: the idle window of the heuristic for devices that never
        // join (<= 0: off).
        deadlock_idle: match f.attr_i64_opt(kb::attr::deadlock_idle_ms)? {
            None => Some(mosaic_rt_core::DEFAULT_DEADLOCK_IDLE),
            Some(ms) if ms <= 0 => None,
            Some(ms) => Some(Duration::from_millis(ms as u64)),
        },
        // Optional: the process of each device (a launch spanning processes).
        owners: match f.attr_i64s_opt(kb::attr::device_processes)? {
            None => None,
            Some(p) => Some(
                p.iter()
                    .map(|&x| u32::try_from(x).map_err(|_| RtError::value(format!("bad process index {x}"))))
                    .collect::<Result<Vec<u32>>>()?
                    .into(),
            ),
        },
    })
}

/// With the optional attribute `device_ordinals` (the XLA device ordinal of
/// each logical device, e.g. the mesh's device ids), checks that `device`
/// really runs where the mesh says: a wrong device id would otherwise join
/// the launch as another device and deadlock or corrupt its memory.
fn check_ordinal(f: &Frame, device: u32, num_devices: u32) -> Result<()> {
    let Some(expected) = f.attr_i64s_opt(kb::attr::device_ordinals)? else {
        return Ok(());
    };
    if expected.len() != num_devices as usize {
        return Err(RtError::value(format!(
            "kernel_begin: device_ordinals has {} entries for {num_devices} device(s)",
            expected.len()
        )));
    }
    let actual = device_ordinal(f)? as i64;
    let want = expected[device as usize];
    if actual != want {
        return Err(RtError::value(format!(
            "kernel_begin: logical device {device} runs on XLA device {actual}, but the mesh \
             places it on XLA device {want}: the device id passed to the kernel does not \
             match the mesh"
        ))
        .at(device, 0));
    }
    Ok(())
}

/// `kernel_begin(token, device) -> (token, handle uint32[2])`;
/// attributes `uid`, the config (see `config_from_attrs`) and optionally
/// `device_ordinals` (see `check_ordinal`).
pub fn kernel_begin(c: &mut Call) -> Result<()> {
    c.frame.expect_arity(kb::arg::FIXED..=kb::arg::FIXED, 2)?;
    join(c).map(|_| ())
}

/// Joins the launch of a `kernel_begin` call frame (operands 0 and 1 the
/// token and the device, result 1 the handle, attributes as there) and
/// binds the call to it; `(handle, device)`. Arity is the caller's check.
pub fn join(c: &mut Call) -> Result<(u64, u32)> {
    let f = &c.frame;
    pass_token(f)?;
    let device = f.arg_id(kb::arg::device, "device id")?;
    let uid = f.attr_i64(kb::attr::uid)? as u64;
    let config = config_from_attrs(f)?;
    config.topology().check_device(device).map_err(|e| e.at(device, 0))?;
    let out = f.ret(1)?;
    out.expect_dtype(DType::U32)?;
    if out.dims != [2] {
        return Err(RtError::value(format!("{}: result 1 must be uint32[2]", f.op)));
    }
    let handle = launch::join(uid, run_id(f)?, device, &config).map_err(|e| e.at(device, 0))?;
    c.bind(handle, device);
    if let Some(path) = c.frame.attr_str_opt(kb::attr::trace_path)?.filter(|p| !p.is_empty()) {
        crate::trace_files::set_output(handle, path);
    }
    // Checked after joining, so that a mismatch fails the whole launch and
    // wakes the devices that joined correctly.
    check_ordinal(&c.frame, device, config.num_devices)?;
    out.write_words(DType::U32, &launch::split_handle(handle).map(u32::to_ne_bytes))?;
    Ok((handle, device))
}

/// `kernel_end(token, handle, device, *inputs, *outputs) -> (token,
/// *outputs)`: leaves the launch; the last device out tears it down.
/// `inputs` are the device's borrowed inputs (`allocate_buffer`'s
/// `borrow`), passed only so that XLA keeps them alive and unmodified until
/// the borrow ends here. `outputs` (as many as results after the token,
/// each aliased to its result) are the device's direct outputs
/// (`allocate_buffer`'s `direct`), in allocation order: they must be the
/// very memory the kernel wrote (an internal error otherwise). Optional
/// attribute `leak_policy`: first the leak report of `leak_report` with
/// that policy (one call for the launch's epilogue instead of two).
pub fn kernel_end(c: &mut Call) -> Result<()> {
    let n_out = c.frame.num_rets().max(1) - 1;
    let (handle, device) = device_target(c, (ke::arg::FIXED + n_out)..=usize::MAX, 1 + n_out)?;
    // DMAs still on their way to this device land before its leak report
    // (a copy never waited for then shows as a count left over).
    launch::with_runtime(handle, |rt| rt.end_device_dmas(device))?;
    if let Some(policy) = c.frame.attr_str_opt(ke::attr::leak_policy)? {
        report_leaks(handle, device, policy.parse()?)?;
    }
    crate::report_sink::deliver(handle, device)?;
    check_borrows_kept_alive(c, handle, device)?;
    // A launch that failed elsewhere must not end quietly on this device.
    launch::with_runtime(handle, |rt| rt.check_failed_at(device, 0))?;
    let results = direct_results(&c.frame, n_out)?;
    launch::with_runtime(handle, |rt| rt.finish_direct_outputs(device, &results))?;
    launch::with_runtime(handle, |rt| crate::trace_files::device_finished(handle, rt, device))?;
    launch::leave(handle, device);
    Ok(())
}

/// (address, length) of each of the `n` direct outputs: the last `n`
/// operands, each the same memory as its result (XLA aliases them; a
/// difference means the result is not what the kernel wrote).
fn direct_results(f: &crate::frame::Frame, n: usize) -> Result<Vec<(usize, usize)>> {
    let first = f.num_args() - n;
    (0..n)
        .map(|k| {
            let (arg, ret) = (f.arg(first + k)?.byte_range()?, f.ret(1 + k)?.byte_range()?);
            if arg != ret {
                return Err(RtError::internal(format!(
                    "kernel_end: direct output {k} arrives at {:#x} but its result is at {:#x} (not aliased)",
                    arg.start, ret.start
                )));
            }
            Ok((arg.start, arg.len()))
        })
        .collect()
}

/// Every input `device` borrows must be an operand of its `kernel_end`
/// (that is what kept it alive until now): a wiring slip in the interpreter
/// fails loudly in tests instead of reading memory XLA may have reused.
fn check_borrows_kept_alive(c: &Call, handle: u64, device: u32) -> Result<()> {
    let borrowed = launch::with_runtime(handle, |rt| Ok(rt.borrowed_ranges(device)))?;
    if borrowed.is_empty() {
        return Ok(());
    }
    let f = &c.frame;
    let kept = (ke::arg::FIXED..f.num_args())
        .map(|i| f.arg(i).and_then(|b| b.byte_range()).map(|r| (r.start, r.len())))
        .collect::<Result<Vec<_>>>()?;
    match borrowed.iter().find(|b| !kept.contains(b)) {
        None => Ok(()),
        Some(&(at, len)) => Err(RtError::internal(format!(
            "kernel_end: device {device} borrowed {len} bytes of XLA memory at {at:#x} for an input \
             that is not an operand of its kernel_end (nothing kept it alive)"
        ))
        .at(device, 0)),
    }
}

/// `leak_report(token, handle, device) -> (token, int32 count)`: the number
/// of (semaphore, core) pairs of `device` left non-zero (or with DMAs never
/// waited for); attribute `policy` = "ignore" | "warn" | "raise" ("raise"
/// fails the launch naming each leak; "warn" queues one report per leak for
/// Python, see `pending_reports`).
pub fn leak_report(c: &mut Call) -> Result<()> {
    let (handle, device) = device_target(c, lr::arg::FIXED..=lr::arg::FIXED, 2)?;
    let policy: LeakPolicy = c.frame.attr_str(lr::attr::policy)?.parse()?;
    let count = report_leaks(handle, device, policy)?;
    c.frame.ret(1)?.write_i32(count.min(i32::MAX as usize) as i32)
}

/// The leaks of `device` under `policy` (see `leak_report`); their count.
fn report_leaks(handle: u64, device: u32, policy: LeakPolicy) -> Result<usize> {
    let (leaks, as_warning) =
        launch::with_runtime(handle, |rt| Ok((rt.leaks(Some(device))?, rt.config().report_as_warnings)))?;
    if policy == LeakPolicy::Raise && !leaks.is_empty() {
        let items: Vec<String> = leaks.iter().map(|l| l.describe()).collect();
        let msg = format!(
            "{} semaphore(s) left with a non-zero count or a DMA never waited for at kernel end \
             on device {device}: {}",
            leaks.len(),
            items.join("; ")
        );
        return Err(RtError::new(ErrorKind::Leak, msg).at(device, leaks[0].core));
    }
    if policy == LeakPolicy::Warn {
        for l in &leaks {
            reports::push(leak_report_of(device, l, as_warning));
        }
    }
    Ok(leaks.len())
}

/// The warning of one leak.
pub fn leak_report_of(device: u32, l: &mosaic_rt_core::Leak, as_warning: bool) -> Report {
    let dma_sites: Vec<String> =
        l.pending_sites.iter().map(|&s| site::text(s).unwrap_or_else(|| "unknown".into())).collect();
    Report {
        category: Category::Leak,
        text: format!("semaphore leak at kernel exit on device {device}: {}", l.describe()),
        details: vec![
            ("semaphore", l.sem.into()),
            ("kind", Detail::from(l.kind.pallas_name())),
            ("device", l.device.into()),
            ("core", l.core.into()),
            ("count", l.count.into()),
            ("site", site::text(l.site).into()),
            ("pending_dmas", Detail::Str(l.pending_dmas.join("\n"))),
            ("pending_dma_sites", Detail::Str(dma_sites.join("\n"))),
        ],
        as_warning,
    }
}

/// `pending_reports(token) -> (token, int32)`: reports ("warn" policy:
/// races, leaks, misuse) queued in this process and not yet taken by
/// Python (`_native.take_reports`); `kernel_end` hands them to the report
/// sink (`crate::report_sink`).
pub fn pending_reports(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    f.expect_arity(wire::pending_reports::arg::FIXED..=wire::pending_reports::arg::FIXED, 2)?;
    pass_token(f)?;
    f.ret(1)?.write_i32(reports::pending().min(i32::MAX as usize) as i32)
}

/// `core_end(token, handle, device, core) -> token`: the program of core
/// (device, core) is done (several cores per device: deadlock detection
/// then knows the core will not signal anyone any more).
pub fn core_end(c: &mut Call) -> Result<()> {
    let (handle, device, core) = super::core_target(c, wire::core_end::arg::FIXED..=wire::core_end::arg::FIXED, 1)?;
    launch::with_runtime(handle, |rt| rt.finish_core(device, core))
}

/// `device_barrier(token, handle, device) -> token`.
pub fn device_barrier(c: &mut Call) -> Result<()> {
    let (handle, device) = device_target(c, wire::device_barrier::arg::FIXED..=wire::device_barrier::arg::FIXED, 1)?;
    let _site = c.enter_site();
    launch::with_runtime(handle, |rt| rt.device_barrier(device))
}

/// `sync_device_cores(token, handle, device) -> token`: the cores of
/// `device` see each other's past (race detection; a no-op without it).
/// Stock does this before and after running a multi-core grid.
pub fn sync_device_cores(c: &mut Call) -> Result<()> {
    let (handle, device) =
        device_target(c, wire::sync_device_cores::arg::FIXED..=wire::sync_device_cores::arg::FIXED, 1)?;
    launch::with_runtime(handle, |rt| rt.sync_device_cores(device))
}

/// `launch_info(token) -> (token, int32[3])`: run id (low, high 32 bits)
/// and device ordinal as XLA reports them to this call (diagnostics/tests).
pub fn launch_info(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    f.expect_arity(wire::launch_info::arg::FIXED..=wire::launch_info::arg::FIXED, 2)?;
    pass_token(f)?;
    let out = f.ret(1)?;
    out.expect_dtype(DType::I32)?;
    if out.dims != [3] {
        return Err(RtError::value("launch_info: result 1 must be int32[3]"));
    }
    let id = run_id(f)?;
    let info = [id as i32, (id >> 32) as i32, device_ordinal(f)?];
    out.write_words(DType::I32, &info.map(i32::to_ne_bytes))
}
