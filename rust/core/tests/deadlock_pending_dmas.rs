//! Deadlock detection never reports a waiter whose semaphore has DMAs queued
//! that would satisfy it (on_wait: the waiter runs them itself), nor one
//! whose DMAs another core has yet to start; and when a DMA wait really
//! cannot complete because earlier waits took the bytes, the report says so.

mod common;

use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::{
    Config, DType, DimSel, DmaMode, DmaRequest, ErrorKind, Init, MemorySpace, Region, Runtime, SemKind,
};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const QUARTER: i64 = 32; // 8 f32 of a 32-element buffer

fn runtime(devices: u32, mode: DmaMode) -> Arc<Runtime> {
    Arc::new(
        Runtime::new(Config {
            num_devices: devices,
            cores_per_device: 1,
            dma_mode: mode,
            // A missed wake-up shows as a timeout, never as a pass.
            wait_timeout: Some(Duration::from_secs(60)),
            detect_deadlocks: true,
            deadlock_idle: Some(Duration::from_millis(200)),
            ..Config::default()
        })
        .unwrap(),
    )
}

/// (src in HBM, dst in VMEM) on every device, and one DMA semaphore.
fn setup(rt: &Runtime) -> (u32, u32, u32) {
    let data: Vec<u8> = (0..128u8).collect();
    let mut ids = (0, 0, 0);
    for d in 0..rt.topology().num_devices {
        let src = rt
            .allocate_buffer(
                d,
                None,
                BufferSpec { init: Init::Bytes(&data), ..BufferSpec::new(MemorySpace::Hbm, DType::F32, &[32]) },
            )
            .unwrap();
        let dst = rt.allocate_buffer(d, None, BufferSpec::new(MemorySpace::Vmem, DType::F32, &[32])).unwrap();
        let sem = rt.allocate_semaphores(d, None, SemKind::Dma, 1).unwrap();
        ids = (src, dst, sem);
    }
    ids
}

/// Quarter `q` of src on `device` to quarter `q` of dst (on `to`, if remote).
fn quarter(device: u32, to: Option<u32>, q: i64, (src, dst, sem): (u32, u32, u32)) -> DmaRequest {
    let region = Region::new(vec![DimSel::slice(8 * q, 8, 1)]);
    DmaRequest {
        device,
        src_region: region.clone(),
        dst_region: region,
        src_sem: to.map(|_| sem),
        dst_device: to,
        ..common::dma(src, dst, sem)
    }
}

#[test]
fn a_waiter_whose_queued_dmas_satisfy_it_completes() {
    // A double-buffered kernel's shape: several page DMAs queued on one
    // semaphore, then one wait per page (and one wait for a whole block).
    for mode in [DmaMode::OnWait, DmaMode::Eager] {
        let rt = runtime(1, mode);
        let ids = setup(&rt);
        for q in 0..4 {
            rt.dma_start(quarter(0, None, q, ids)).unwrap();
        }
        for _ in 0..4 {
            rt.dma_wait(0, 0, ids.2, QUARTER).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
        for q in 0..4 {
            rt.dma_start(quarter(0, None, q, ids)).unwrap();
        }
        rt.dma_wait(0, 0, ids.2, 4 * QUARTER).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        assert_eq!(rt.semaphore_read(0, 0, ids.2).unwrap(), 0);
        assert!(rt.leaks(None).unwrap().is_empty());
    }
}

#[test]
fn a_waiter_parked_before_its_remote_dmas_start_is_not_a_deadlock() {
    // Device 0 parks first (nothing queued yet, device 1 running); device 1
    // starts its DMAs after a while, one at a time, in both orders of
    // start and park across the iterations.
    for round in 0..40u64 {
        for mode in [DmaMode::OnWait, DmaMode::Eager] {
            let rt = runtime(2, mode);
            let ids = setup(&rt);
            let rt1 = Arc::clone(&rt);
            let sender = thread::spawn(move || {
                thread::sleep(Duration::from_micros(200 * (round % 5)));
                for q in 0..4 {
                    rt1.dma_start(quarter(1, Some(0), q, ids))?;
                    rt1.dma_wait(1, 0, ids.2, QUARTER)?; // the send side
                }
                Ok::<(), mosaic_rt_core::RtError>(())
            });
            for _ in 0..4 {
                rt.dma_wait(0, 0, ids.2, QUARTER).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            }
            sender.join().unwrap().unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        }
    }
}

#[test]
fn a_wait_whose_bytes_earlier_waits_took_says_so() {
    // The shape of a megacore kernel run by one core: the second half of the
    // grid waits for a block it never started; the semaphore's DMAs all
    // delivered, and the first half's waits took every byte.
    for mode in [DmaMode::OnWait, DmaMode::Eager] {
        let rt = runtime(1, mode);
        let ids = setup(&rt);
        for q in 0..4 {
            rt.dma_start(quarter(0, None, q, ids)).unwrap();
        }
        for _ in 0..4 {
            rt.dma_wait(0, 0, ids.2, QUARTER).unwrap();
        }
        let e = rt.dma_wait(0, 0, ids.2, QUARTER).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
        assert!(
            e.message.contains(
                "the 4 DMA(s) started on it have all delivered, 128 bytes in all, and earlier waits took 128 of them"
            ),
            "{mode:?}: {}",
            e.message
        );
    }
}
