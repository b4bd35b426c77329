//! Handlers called directly with fake XLA call frames (no XLA, no Python).

use mosaic_rt_ffi::abi;
use mosaic_rt_ffi::c_handlers as h;
use mosaic_rt_ffi::testing::{set_run_id, FakeCall};
use std::sync::atomic::{AtomicI64, Ordering};

static NEXT_UID: AtomicI64 = AtomicI64::new(1);

fn begin(device: i32, num_devices: i64, uid: i64, timeout_ms: i64) -> Result<[u32; 2], String> {
    let mut c = FakeCall::new()
        .arg_i32(0)
        .arg_i32(device)
        .ret_i32()
        .ret(abi::DT_U32, &[2], 8)
        .attr_i64("uid", uid)
        .attr_i64("num_devices", num_devices)
        .attr_i64("num_cores", 1)
        .attr_str("dma_execution_mode", "on_wait")
        .attr_str("out_of_bounds_reads", "raise")
        .attr_str("uninitialized_memory", "nan")
        .attr_i64("wait_timeout_ms", timeout_ms);
    c.call(h::kernel_begin)?;
    let b = c.ret_bytes(1);
    Ok([u32::from_le_bytes(b[0..4].try_into().unwrap()), u32::from_le_bytes(b[4..8].try_into().unwrap())])
}

fn uid() -> i64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}

fn device_call(handle: [u32; 2], device: i32) -> FakeCall {
    FakeCall::new().arg_i32(0).arg_handle(handle).arg_i32(device)
}

fn core_call(handle: [u32; 2], device: i32) -> FakeCall {
    device_call(handle, device).arg_i32(0)
}

fn alloc_sem(handle: [u32; 2], device: i32) -> Result<i32, String> {
    let mut c = core_call(handle, device).ret_i32().ret_i32().attr_str("kind", "regular").attr_i64("count", 1);
    c.call(h::allocate_semaphores)?;
    Ok(c.ret_i32_value(1))
}

fn signal(handle: [u32; 2], device: i32, sem: i32, inc: i32, target: i32) -> Result<(), String> {
    core_call(handle, device).arg_i32(sem).arg_i32(inc).arg_i32(target).arg_i32(-1).ret_i32().call(h::semaphore_signal)
}

fn wait(handle: [u32; 2], device: i32, sem: i32, value: i32) -> Result<(), String> {
    core_call(handle, device).arg_i32(sem).arg_i32(value).ret_i32().call(h::semaphore_wait)
}

fn read(handle: [u32; 2], device: i32, sem: i32) -> Result<i32, String> {
    let mut c = core_call(handle, device).arg_i32(sem).ret_i32().ret_i32();
    c.call(h::semaphore_read)?;
    Ok(c.ret_i32_value(1))
}

fn end(handle: [u32; 2], device: i32) -> Result<(), String> {
    device_call(handle, device).ret_i32().call(h::kernel_end)
}

#[test]
fn metadata_handshake_fills_the_api_version() {
    let mut meta = abi::Metadata {
        struct_size: std::mem::size_of::<abi::Metadata>(),
        api_version: abi::ApiVersion {
            struct_size: std::mem::size_of::<abi::ApiVersion>(),
            extension_start: std::ptr::null_mut(),
            major_version: 0,
            minor_version: 0,
        },
        traits: 77,
        state_type_id: 0,
    };
    let mut ext = abi::MetadataExtension {
        extension_base: abi::ExtensionBase {
            struct_size: std::mem::size_of::<abi::MetadataExtension>(),
            type_: abi::EXTENSION_METADATA,
            next: std::ptr::null_mut(),
        },
        metadata: &mut meta,
    };
    for (_, addr) in mosaic_rt_ffi::handlers() {
        // SAFETY: `handlers()` lists addresses of `abi::Handler` functions.
        let handler: abi::Handler = unsafe { std::mem::transmute(addr) };
        let mut fake = FakeCall::new();
        let mut p = fake.prepare();
        p.frame.api = std::ptr::null(); // XLA may pass no API table here
        p.frame.args.size = 0;
        p.frame.extension_start = &mut ext.extension_base;
        meta.traits = 77;
        assert!(p.call(handler).is_ok());
        assert_eq!((meta.api_version.major_version, meta.api_version.minor_version), (0, 3));
        assert_eq!(meta.traits, 0);
    }
}

#[test]
fn wrong_stage_and_small_frames_are_errors() {
    let mut fake = FakeCall::new().arg_i32(0).ret_i32();
    let mut p = fake.prepare();
    p.frame.stage = 0;
    let e = p.call(h::launch_info).unwrap_err();
    assert!(e.contains("unexpected execution stage 0"), "{e}");
    p.frame.stage = abi::STAGE_EXECUTE;
    p.frame.struct_size = 160;
    let e = p.call(h::launch_info).unwrap_err();
    assert!(e.contains("call frame too small"), "{e}");
}

#[test]
fn single_device_signal_wait_read_end() {
    let handle = begin(0, 1, uid(), 5000).unwrap();
    let sem = alloc_sem(handle, 0).unwrap();
    assert_eq!(sem, 2000);
    signal(handle, 0, sem, 5, -1).unwrap();
    wait(handle, 0, sem, 2).unwrap();
    assert_eq!(read(handle, 0, sem).unwrap(), 3);
    wait(handle, 0, sem, 3).unwrap();
    end(handle, 0).unwrap();
    // The launch is gone: its handle is unknown now.
    let e = read(handle, 0, sem).unwrap_err();
    assert!(e.contains("unknown kernel launch handle"), "{e}");
}

#[test]
fn errors_carry_the_root_cause_and_fail_the_launch() {
    let handle = begin(0, 1, uid(), 5000).unwrap();
    let e = signal(handle, 0, 4711, 1, -1).unwrap_err();
    let n: u64 = e
        .strip_prefix("[mosaic_rt#")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no marker in {e:?}"));
    let root = mosaic_rt_ffi::recorded_error(n).unwrap();
    assert_eq!(e, format!("[mosaic_rt#{n}] ValueError: {}", root.message));
    assert!(root.message.contains("4711"));
    assert_eq!((root.device, root.core), (Some(0), Some(0)));
    // The only device abandoned the launch: it is torn down, and a late op
    // of it reports the launch's root cause (its tombstone), not an
    // unknown handle.
    let late = read(handle, 0, 2000).unwrap_err();
    assert!(late.contains("4711") && !late.contains("unknown kernel launch handle"), "{late}");
}

#[test]
fn bad_operands_are_reported_not_crashes() {
    let handle = begin(0, 1, uid(), 5000).unwrap();
    let e = core_call(handle, 0).arg_i32(2000).ret_i32().call(h::semaphore_signal).unwrap_err();
    assert!(e.contains("expected 8 operand(s) and 1 result(s), got 5 and 1"), "{e}");
    let handle = begin(0, 1, uid(), 5000).unwrap();
    let e =
        core_call(handle, 0).arg(abi::DT_F32, &[], vec![0; 4]).ret_i32().ret_i32().call(h::semaphore_read).unwrap_err();
    assert!(e.contains("operand 4 must be int32, got float32"), "{e}");
}

#[test]
fn run_ids_separate_launches_of_the_same_uid() {
    let u = uid();
    set_run_id(100);
    let a = begin(0, 1, u, 5000).unwrap();
    set_run_id(101);
    let b = begin(0, 1, u, 5000).unwrap();
    assert_ne!(a, b);
    end(a, 0).unwrap();
    end(b, 0).unwrap();
    set_run_id(1);
}

#[test]
fn two_devices_ping_pong_on_threads() {
    let u = uid();
    let rounds = 200;
    let threads: Vec<_> = (0..2)
        .map(|d| {
            std::thread::spawn(move || {
                set_run_id(555);
                let handle = begin(d, 2, u, 120_000).unwrap();
                let sem = alloc_sem(handle, d).unwrap();
                for _ in 0..rounds {
                    if d == 0 {
                        signal(handle, 0, sem, 1, 1).unwrap();
                        wait(handle, 0, sem, 1).unwrap();
                    } else {
                        wait(handle, 1, sem, 1).unwrap();
                        signal(handle, 1, sem, 1, 0).unwrap();
                    }
                }
                let left = read(handle, d, sem).unwrap();
                end(handle, d).unwrap();
                left
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 0);
    }
}

#[test]
fn a_failure_wakes_the_other_device_with_the_root_cause() {
    let u = uid();
    let waiter = std::thread::spawn(move || {
        set_run_id(777);
        let handle = begin(0, 2, u, 300_000).unwrap();
        let sem = alloc_sem(handle, 0).unwrap();
        wait(handle, 0, sem, 1).unwrap_err()
    });
    set_run_id(777);
    let handle = begin(1, 2, u, 300_000).unwrap();
    alloc_sem(handle, 1).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let t0 = std::time::Instant::now();
    let mine = signal(handle, 1, 9898, 1, -1).unwrap_err();
    let theirs = waiter.join().unwrap();
    // Woken by the failure, not by its 300 s timeout (which would end it
    // with the same root cause): only a lost wake-up takes minutes.
    assert!(t0.elapsed().as_secs() < 120, "the waiter was not woken by the failure");
    assert_eq!(mine, theirs); // the root cause, same number, on both devices
    assert!(mine.contains("ValueError") && mine.contains("9898"), "{mine}");
}

#[test]
fn a_malformed_call_still_fails_the_launch_it_names() {
    let u = uid();
    let waiter = std::thread::spawn(move || {
        set_run_id(888);
        let handle = begin(0, 2, u, 30_000).unwrap();
        let sem = alloc_sem(handle, 0).unwrap();
        wait(handle, 0, sem, 1).unwrap_err()
    });
    set_run_id(888);
    let handle = begin(1, 2, u, 30_000).unwrap();
    alloc_sem(handle, 1).unwrap();
    // One operand short: the handle and device are still readable, so the
    // launch is failed and the waiter on device 0 is woken.
    let mine = core_call(handle, 1).arg_i32(2000).ret_i32().call(h::semaphore_signal).unwrap_err();
    let theirs = waiter.join().unwrap();
    assert_eq!(mine, theirs);
    assert!(mine.contains("expected 8 operand(s)"), "{mine}");
}

#[test]
fn null_buffer_pointers_are_errors_not_crashes() {
    // Each case fails its launch (a later op of a failed launch reports
    // that launch's first failure), so each gets a launch of its own.
    let launch = || {
        let handle = begin(0, 1, uid(), 5000).unwrap();
        (handle, alloc_sem(handle, 0).unwrap())
    };
    let (handle, sem) = launch();
    // A result whose data pointer is null.
    let e = core_call(handle, 0).arg_i32(sem).ret_i32().ret_i32().null_ret_data(1).call(h::semaphore_read).unwrap_err();
    assert!(e.contains("result 1 has no data (null pointer)"), "{e}");
    // A later op of that failed launch reports its first failure.
    let e = read(handle, 0, sem).unwrap_err();
    assert!(e.contains("result 1 has no data (null pointer)"), "{e}");
    // An operand whose data pointer is null (the fast path falls back to
    // the checked one).
    let (handle, sem) = launch();
    let e = core_call(handle, 0)
        .arg_i32(sem)
        .arg_i32(1)
        .arg_i32(-1)
        .arg_i32(-1)
        .ret_i32()
        .null_arg_data(4)
        .call(h::semaphore_signal)
        .unwrap_err();
    assert!(e.contains("operand 4 has no data (null pointer)"), "{e}");
    // The handle (rank 1) with a null dims pointer.
    let (handle, sem) = launch();
    let e = core_call(handle, 0).arg_i32(sem).ret_i32().ret_i32().null_arg_dims(1).call(h::semaphore_read).unwrap_err();
    assert!(e.contains("operand 1 has a negative rank or no dimensions"), "{e}");
    // The launch failed with those errors; a new one works.
    let handle = begin(0, 1, uid(), 5000).unwrap();
    let sem = alloc_sem(handle, 0).unwrap();
    assert_eq!(read(handle, 0, sem).unwrap(), 0);
    end(handle, 0).unwrap();
}

#[test]
fn null_tables_in_the_frame_are_errors_not_crashes() {
    let mut fake = FakeCall::new().arg_i32(0).arg_i32(0).ret_i32().ret(abi::DT_U32, &[2], 8).attr_i64("uid", uid());
    let mut p = fake.prepare();
    p.frame.args.types = std::ptr::null_mut();
    let e = p.call(h::kernel_begin).unwrap_err();
    assert!(e.contains("missing operand 0"), "{e}");
    let mut p = fake.prepare();
    p.frame.rets.rets = std::ptr::null_mut();
    let e = p.call(h::kernel_begin).unwrap_err();
    assert!(e.contains("missing result 0") || e.contains("bad token"), "{e}");
    let mut p = fake.prepare();
    p.frame.attrs.names = std::ptr::null_mut();
    let e = p.call(h::kernel_begin).unwrap_err();
    assert!(e.contains("missing attribute"), "{e}");
}
