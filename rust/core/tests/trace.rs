//! Timelines (`Config::trace`): what a launch records and how it is
//! exported. (tests/ffi/test_timeline.py checks the files structurally with a
//! JSON parser.)

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{Config, DType, DmaMode, DmaRequest, Init, MemorySpace, Region, Runtime, SemKind};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

fn runtime(devices: u32, mode: DmaMode, trace: bool) -> Runtime {
    Runtime::new(Config {
        num_devices: devices,
        dma_mode: mode,
        trace,
        wait_timeout: Some(Duration::from_secs(120)),
        ..Config::default()
    })
    .unwrap()
}

fn json(rt: &Runtime) -> String {
    rt.tracer().unwrap().to_json()
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn tracing_is_off_by_default() {
    assert!(runtime(1, DmaMode::Eager, false).tracer().is_none());
}

#[test]
fn signals_waits_and_flows() {
    let rt = Arc::new(runtime(2, DmaMode::OnWait, true));
    let sem = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    let sem1 = rt.allocate_semaphores(1, None, SemKind::Regular, 1).unwrap();
    assert_eq!(sem, sem1);
    let waiter = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || {
            rt.tracer().unwrap().grid_step(1, 0, &[0, 1], true);
            rt.semaphore_wait(1, 0, sem, 2).unwrap();
            rt.tracer().unwrap().grid_step(1, 0, &[], false);
        })
    };
    thread::sleep(Duration::from_millis(20));
    {
        // What the FFI layer does around each call.
        let _site = mosaic_rt_core::site::enter(7);
        rt.semaphore_signal(0, 0, sem, 1, Some(1), None).unwrap();
        rt.semaphore_signal(0, 0, sem, 1, Some(1), None).unwrap();
    }
    waiter.join().unwrap();
    let j = json(&rt);
    assert_eq!(count(&j, "\"name\": \"step (0, 1)\""), 1, "{j}");
    assert_eq!(count(&j, "\"name\": \"signal sem 2000 +1 -> device 1, core 0\""), 2);
    assert_eq!(count(&j, "\"name\": \"wait sem 2000 >= 2\""), 1);
    // One flow: from the last signal to the wait it released.
    assert_eq!(count(&j, "\"ph\": \"s\""), 1);
    assert_eq!(count(&j, "\"ph\": \"f\", \"bp\": \"e\""), 1);
    // Without a site table (the binding's) sites read `site#N`.
    assert_eq!(count(&j, "\"site\": \"site#7\""), 2);
    assert!(j.contains("\"process_name\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"device 1\"}"));
    // The wait ended no earlier than the signal that released it (a causal
    // order, not a duration: a loaded machine may start the waiter late).
    let wait = j.lines().find(|l| l.contains("wait sem 2000")).unwrap();
    let last_signal = j.lines().filter(|l| l.contains("signal sem 2000")).map(|l| number(l, "ts")).fold(0.0, f64::max);
    assert!(number(wait, "ts") + number(wait, "dur") >= last_signal, "{wait}\n{j}");
}

/// The number after `"key": ` in one exported event line.
fn number(line: &str, key: &str) -> f64 {
    let tail = line.split(&format!("\"{key}\": ")).nth(1).unwrap_or_else(|| panic!("no {key} in {line}"));
    tail.split([',', '}']).next().unwrap().trim().parse().unwrap()
}

fn dma(src: u32, dst: u32, sem: u32) -> DmaRequest {
    common::dma(src, dst, sem)
}

#[test]
fn dmas_are_spans_on_lanes_and_their_completion_releases_the_wait() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let rt = runtime(1, mode, true);
        let sem = rt.allocate_semaphores(0, Some(0), SemKind::Dma, 1).unwrap();
        let src = rt
            .allocate_buffer(
                0,
                Some(0),
                BufferSpec {
                    init: Init::Bytes(&[0; 4096]),
                    ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &[8, 128])
                },
            )
            .unwrap();
        let a = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::F32, &[8, 128])).unwrap();
        let b = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::F32, &[8, 128])).unwrap();
        // Two DMAs in flight at once (on_wait): two lanes.
        rt.dma_start(dma(src, a, sem)).unwrap();
        rt.dma_start(dma(src, b, sem)).unwrap();
        rt.dma_wait(0, 0, sem, 4096).unwrap();
        rt.dma_wait(0, 0, sem, 4096).unwrap();
        let j = json(&rt);
        assert_eq!(count(&j, "\"cat\": \"dma\""), 2, "{mode:?}: {j}");
        assert!(j.contains("\"name\": \"DMA #0 hbm 100[0:8, 0:128] -> vmem 101[0:8, 0:128]\""), "{j}");
        assert_eq!(count(&j, "\"name\": \"dma_wait sem 2000 >= 4096 B\""), 2);
        assert_eq!(count(&j, "\"ph\": \"s\""), 2);
        assert_eq!(count(&j, "\"ph\": \"f\""), 2);
        let lanes = count(&j, "\"name\": \"core 0 DMA lane 1\"");
        assert_eq!(lanes, (mode == DmaMode::OnWait) as usize, "{mode:?}");
    }
}

#[test]
fn unfinished_dmas_and_steps_end_at_export() {
    let rt = runtime(1, DmaMode::OnWait, true);
    let sem = rt.allocate_semaphores(0, Some(0), SemKind::Dma, 1).unwrap();
    let src = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Hbm, DType::F32, &[8])).unwrap();
    let dst = rt.allocate_buffer(0, Some(0), BufferSpec::new(MemorySpace::Vmem, DType::F32, &[8])).unwrap();
    rt.tracer().unwrap().grid_step(0, 0, &[3], true);
    rt.dma_start(DmaRequest { src_region: Region::full(), ..dma(src, dst, sem) }).unwrap();
    let j = json(&rt);
    assert!(j.contains("\"completed\": \"no: never waited for\""), "{j}");
    assert!(j.contains("\"name\": \"step (3)\""), "{j}");
}

#[test]
fn barriers_and_failed_waits_are_spans() {
    let rt = Arc::new(
        Runtime::new(Config {
            num_devices: 2,
            trace: true,
            wait_timeout: Some(Duration::from_millis(50)),
            ..Config::default()
        })
        .unwrap(),
    );
    let other = {
        let rt = Arc::clone(&rt);
        thread::spawn(move || rt.device_barrier(1).unwrap())
    };
    rt.device_barrier(0).unwrap();
    other.join().unwrap();
    let sem = rt.allocate_semaphores(0, Some(0), SemKind::Regular, 1).unwrap();
    rt.semaphore_wait(0, 0, sem, 1).unwrap_err();
    let j = json(&rt);
    assert_eq!(count(&j, "\"name\": \"device barrier\""), 2);
    assert!(j.contains("\"error\": \"WaitTimeout\""), "{j}");
    assert_eq!(count(&j, "\"ph\": \"f\""), 0);
}

#[test]
fn the_last_device_to_finish_is_told_once() {
    let rt = runtime(3, DmaMode::Eager, true);
    let t = rt.tracer().unwrap();
    assert!(!t.device_finished(2));
    assert!(!t.device_finished(2));
    assert!(!t.device_finished(0));
    assert!(t.device_finished(1));
    assert!(!t.device_finished(1));
}
