//! Concurrent access from many core threads: shared HBM, remote copies in
//! opposite directions (lock ordering), allocation churn, torn-read checks.
//! Every test runs under a watchdog so a deadlock fails instead of hanging.

mod memory_support;

use mosaic_rt_core::BufferSpec;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use memory_support::*;
use mosaic_rt_core::memory::MemRef;
use mosaic_rt_core::{BufferKey, DType, DimSel, FillMode, Init, MemorySpace, OobReads, Region};

const HBM: MemorySpace = MemorySpace::Hbm;

fn with_watchdog(name: &str, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    // Only a true hang takes this long: the bodies need well under a second
    // (debug build), so even a heavily loaded machine stays far below it.
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(()) => worker.join().unwrap(),
        // The body panicked (sender dropped): re-raise its panic.
        Err(mpsc::RecvTimeoutError::Disconnected) => std::panic::resume_unwind(worker.join().unwrap_err()),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{name}: deadlock (not done after 300 s)"),
    }
}

#[test]
fn cores_write_their_own_rows_of_shared_hbm() {
    with_watchdog("rows", || {
        const CORES: u32 = 8;
        let mem = table(1, CORES, OobReads::Raise, FillMode::Zero);
        let id = mem.allocate(0, None, BufferSpec::new(HBM, DType::U32, &[CORES as usize, 64])).unwrap();
        thread::scope(|s| {
            for core in 0..CORES {
                let mem = &mem;
                s.spawn(move || {
                    let row = Region::new(vec![DimSel::index(core as i64)]);
                    for step in 0..2000u32 {
                        let v = (core << 16 | step).to_le_bytes().repeat(64);
                        mem.store(MemRef::new(0, core, HBM, id, &row), &v).unwrap();
                        let mut out = vec![0u8; 256];
                        mem.load(MemRef::new(0, core, HBM, id, &row), &mut out).unwrap();
                        assert_eq!(out, v);
                    }
                });
            }
        });
        let content = mem.content(BufferKey { space: HBM, id, device: 0, core: 0 }).unwrap();
        for core in 0..CORES as usize {
            let want = ((core as u32) << 16 | 1999).to_le_bytes().repeat(64);
            assert_eq!(content[core * 256..(core + 1) * 256], want[..]);
        }
    });
}

#[test]
fn loads_never_see_torn_stores() {
    with_watchdog("torn", || {
        let mem = table(2, 1, OobReads::Raise, FillMode::Zero);
        let id = mem.allocate(1, Some(0), BufferSpec::new(HBM, DType::U8, &[64, 1024])).unwrap();
        thread::scope(|s| {
            let mem = &mem;
            s.spawn(move || {
                for k in 0..300u32 {
                    mem.store(MemRef::new(1, 0, HBM, id, &Region::full()), &vec![k as u8; 65536]).unwrap();
                }
            });
            for _ in 0..2 {
                s.spawn(move || {
                    let mut out = vec![0u8; 65536];
                    for _ in 0..300 {
                        mem.load(MemRef::new(1, 0, HBM, id, &Region::full()), &mut out).unwrap();
                        assert!(out.iter().all(|&b| b == out[0]), "torn read");
                    }
                });
            }
        });
    });
}

#[test]
fn opposite_remote_copies_do_not_deadlock() {
    with_watchdog("copies", || {
        let mem = table(2, 1, OobReads::Raise, FillMode::Zero);
        let a = mem.allocate(0, Some(0), BufferSpec::new(HBM, DType::F32, &[16, 128])).unwrap();
        let b = mem.allocate(1, Some(0), BufferSpec::new(HBM, DType::F32, &[16, 128])).unwrap();
        let whole = Region::full();
        thread::scope(|s| {
            for device in 0..2u32 {
                let (mem, whole) = (&mem, &whole);
                s.spawn(move || {
                    let (mine, theirs) = if device == 0 { (a, b) } else { (b, a) };
                    for _ in 0..3000 {
                        let src = MemRef { device, core: 0, space: HBM, id: mine, region: whole };
                        let dst = MemRef { device: 1 - device, core: 0, space: HBM, id: theirs, region: whole };
                        assert_eq!(mem.copy(src, dst).unwrap(), 16 * 128 * 4);
                    }
                });
            }
        });
    });
}

#[test]
fn allocation_churn_alongside_accesses() {
    with_watchdog("churn", || {
        let mem = table(4, 2, OobReads::Raise, FillMode::Nan);
        let shared = mem.allocate(0, None, BufferSpec::new(HBM, DType::I32, &[8, 8])).unwrap();
        thread::scope(|s| {
            for device in 0..4u32 {
                for core in 0..2u32 {
                    let mem = &mem;
                    s.spawn(move || {
                        let mut rng = Rng::new((device * 2 + core) as u64);
                        // Device 0's ids start after the shared HBM buffer's.
                        let first = if device == 0 { 101 } else { 100 };
                        for expected_id in first..first + 500 {
                            let data = rng.bytes(16);
                            let id = mem
                                .allocate(
                                    device,
                                    Some(core),
                                    BufferSpec {
                                        init: Init::Bytes(&data),
                                        ..BufferSpec::new(MemorySpace::Vmem, DType::I32, &[4])
                                    },
                                )
                                .unwrap();
                            assert_eq!(id, expected_id);
                            let mut out = [0u8; 16];
                            mem.load(MemRef::new(device, core, MemorySpace::Vmem, id, &Region::full()), &mut out)
                                .unwrap();
                            assert_eq!(out[..], data[..]);
                            // Remote reads of device 0's shared HBM from everywhere.
                            let row = Region::new(vec![DimSel::index(core as i64)]);
                            let mut row_out = [0u8; 32];
                            mem.load(MemRef::new(0, core, HBM, shared, &row), &mut row_out).unwrap();
                            mem.free(device, core, MemorySpace::Vmem, id).unwrap();
                        }
                    });
                }
            }
        });
        assert_eq!(mem.info(BufferKey { space: HBM, id: shared, device: 0, core: 0 }).unwrap().ref_count, 2);
    });
}
