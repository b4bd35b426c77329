//! Differential test of the race detector against a brute-force oracle:
//! random programs of 3 cores (loads/stores of slices of two HBM buffers,
//! semaphore signals and waits, DMAs with their waits, device barriers),
//! run sequentially on a `Runtime`; the oracle builds the happens-before
//! graph explicitly (one node per event, ancestor sets) and checks every
//! access against every earlier one. The first op that races must be the
//! same for both (after a race, per-location summaries may legitimately
//! differ from the full history).

mod common;
mod memory_support;

use memory_support::Rng;
use mosaic_rt_core::BufferSpec;
use mosaic_rt_core::MemRef;
use mosaic_rt_core::{Config, DType, DimSel, DmaMode, DmaRequest, Init, MemorySpace, Region, Runtime, SemKind};
use std::collections::HashMap;

const CORES: u32 = 3;
const LEN: i64 = 8;
const HBM: MemorySpace = MemorySpace::Hbm;

/// The happens-before graph: each node's ancestors (itself included).
#[derive(Default)]
struct Oracle {
    ancestors: Vec<Vec<bool>>,
    last: HashMap<u32, usize>, // thread -> last node
    signals: HashMap<(u32, u32), Vec<usize>>,
    accesses: Vec<(usize, bool, u32, i64, i64)>, // node, write, buffer, start, len
}

impl Oracle {
    fn node(&mut self, preds: &[usize]) -> usize {
        let id = self.ancestors.len();
        let mut anc = vec![false; id + 1];
        for &p in preds {
            for (k, &a) in self.ancestors[p].iter().enumerate() {
                anc[k] |= a;
            }
        }
        anc[id] = true;
        self.ancestors.push(anc);
        id
    }
    /// A new event of `thread` after its previous one (and after `extra`).
    fn step(&mut self, thread: u32, extra: &[usize]) -> usize {
        let mut preds: Vec<usize> = extra.to_vec();
        preds.extend(self.last.get(&thread));
        let n = self.node(&preds);
        self.last.insert(thread, n);
        n
    }
    /// Records an access; true if it races with an earlier one.
    fn access(&mut self, node: usize, write: bool, buf: u32, start: i64, len: i64) -> bool {
        let racy = self.accesses.iter().any(|&(a, w, b, s, l)| {
            b == buf && (w || write) && s < start + len && start < s + l && !self.ancestors[node][a]
        });
        self.accesses.push((node, write, buf, start, len));
        racy
    }
    fn signal(&mut self, thread: u32, sem: u32, target: u32) {
        let n = self.step(thread, &[]);
        self.signals.entry((sem, target)).or_default().push(n);
    }
    fn wait(&mut self, thread: u32, sem: u32) {
        let sigs = self.signals.get(&(sem, thread)).cloned().unwrap_or_default();
        self.step(thread, &sigs);
    }
}

struct PendingDma {
    core: u32,
    sem: u32,
    bytes: i64,
    start_node: usize,
    src: (u32, i64),
    dst: (u32, i64),
    len: i64,
}

fn region(start: i64, len: i64) -> Region {
    Region::new(vec![DimSel::slice(start, len, 1)])
}

/// Runs one random program; returns (first racing op per ours, per oracle).
fn run(seed: u64, mode: DmaMode) -> (Option<usize>, Option<usize>) {
    let mut rng = Rng::new(seed);
    let rt = Runtime::new(Config {
        num_devices: 1,
        cores_per_device: CORES,
        dma_mode: mode,
        detect_races: true,
        wait_timeout: Some(std::time::Duration::from_secs(5)),
        ..Config::default()
    })
    .unwrap();
    let bufs: Vec<u32> = (0..2)
        .map(|_| {
            rt.allocate_buffer(
                0,
                None,
                BufferSpec { init: Init::Bytes(&[0; 32]), ..BufferSpec::new(HBM, DType::F32, &[LEN as usize]) },
            )
            .unwrap()
        })
        .collect();
    let reg = rt.allocate_semaphores(0, None, SemKind::Regular, 1).unwrap();
    let mut counts = [0i64; CORES as usize];
    let mut pending: Vec<PendingDma> = Vec::new();
    let mut o = Oracle::default();
    let (mut ours_first, mut oracle_first) = (None, None);
    let mut dma_thread = 1000u32; // oracle thread ids of DMAs

    // A DMA's read, write and completion signal, as the oracle sees them.
    let run_dma = |o: &mut Oracle, d: &PendingDma, dma_thread: &mut u32| -> bool {
        *dma_thread += 1;
        let t = *dma_thread;
        let r = o.step(t, &[d.start_node]);
        let mut racy = o.access(r, false, d.src.0, d.src.1, d.len);
        let w = o.step(t, &[]);
        racy |= o.access(w, true, d.dst.0, d.dst.1, d.len);
        o.signal(t, d.sem, d.core);
        racy
    };

    // Most ops run on a "current" core that hands over with a signal/wait
    // pair, so that well-synchronised programs are common too.
    let mut current = 0u32;
    for op in 0..24 {
        let before = rt.races().unwrap().count();
        let core = if rng.below(10) == 0 { rng.below(CORES as u64) as u32 } else { current };
        let mut oracle_racy = false;
        match rng.below(14) {
            10 | 11 => {
                let target = rng.below(CORES as u64) as u32;
                rt.semaphore_signal(0, current, reg, 1, None, Some(target)).unwrap();
                o.signal(current, reg, target);
                rt.semaphore_wait(0, target, reg, 1).unwrap();
                o.wait(target, reg);
                current = target;
            }
            0..=3 => {
                let b = rng.below(2) as u32;
                let start = rng.below(LEN as u64) as i64;
                let len = 1 + rng.below((LEN - start) as u64) as i64;
                let write = rng.below(2) == 0;
                let n = (len * 4) as usize;
                if write {
                    rt.store(MemRef::new(0, core, HBM, bufs[b as usize], &region(start, len)), &vec![1; n]).unwrap();
                } else {
                    rt.load(MemRef::new(0, core, HBM, bufs[b as usize], &region(start, len)), &mut vec![0; n]).unwrap();
                }
                let node = o.step(core, &[]);
                oracle_racy = o.access(node, write, b, start, len);
            }
            4 => {
                let target = rng.below(CORES as u64) as u32;
                rt.semaphore_signal(0, core, reg, 1, None, Some(target)).unwrap();
                counts[target as usize] += 1;
                o.signal(core, reg, target);
            }
            12 => {
                if counts[core as usize] > 0 {
                    rt.semaphore_wait(0, core, reg, 1).unwrap();
                    counts[core as usize] -= 1;
                    o.wait(core, reg);
                }
            }
            7 => {
                let len = 1 + rng.below(4) as i64;
                let (sb, db) = (rng.below(2) as u32, rng.below(2) as u32);
                let (ss, ds) = (rng.below((LEN - len + 1) as u64) as i64, rng.below((LEN - len + 1) as u64) as i64);
                if sb == db && ss < ds + len && ds < ss + len {
                    continue; // overlapping copies within one buffer: not a DMA a kernel makes
                }
                let sem = rt.allocate_semaphores(0, None, SemKind::Dma, 1).unwrap();
                rt.dma_start(DmaRequest {
                    core,
                    src_space: HBM,
                    src_region: region(ss, len),
                    dst_space: HBM,
                    dst_region: region(ds, len),
                    ..common::dma(bufs[sb as usize], bufs[db as usize], sem)
                })
                .unwrap();
                let start_node = o.step(core, &[]);
                let d = PendingDma { core, sem, bytes: len * 4, start_node, src: (sb, ss), dst: (db, ds), len };
                if mode == DmaMode::Eager {
                    oracle_racy = run_dma(&mut o, &d, &mut dma_thread);
                }
                pending.push(d);
            }
            6 | 8 | 9 => {
                if let Some(k) = pending.iter().position(|d| d.core == core) {
                    let d = pending.remove(k);
                    if mode == DmaMode::OnWait {
                        // The waiter runs the DMA (its own semaphore: exactly this one).
                        oracle_racy = run_dma(&mut o, &d, &mut dma_thread);
                    }
                    rt.dma_wait(0, core, d.sem, d.bytes).unwrap();
                    o.wait(core, d.sem);
                }
            }
            _ => {
                rt.device_barrier(0).unwrap();
                let preds: Vec<usize> = (0..CORES).filter_map(|c| o.last.get(&c).copied()).collect();
                let n = o.node(&preds);
                for c in 0..CORES {
                    o.last.insert(c, n);
                }
            }
        }
        if ours_first.is_none() && rt.races().unwrap().count() > before {
            ours_first = Some(op);
        }
        if oracle_first.is_none() && oracle_racy {
            oracle_first = Some(op);
        }
        if ours_first.is_some() || oracle_first.is_some() {
            break;
        }
    }
    (ours_first, oracle_first)
}

#[test]
fn first_race_matches_a_brute_force_happens_before_oracle() {
    for mode in [DmaMode::Eager, DmaMode::OnWait] {
        let (mut racy, mut clean) = (0, 0);
        // RACES_ORACLE_ITERS=N runs more programs (default 2000).
        let iterations: u64 = std::env::var("RACES_ORACLE_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
        for seed in 0..iterations {
            let (ours, oracle) = run(seed, mode);
            assert_eq!(ours, oracle, "seed {seed}, {mode:?}: first racing op (ours vs oracle)");
            if oracle.is_some() {
                racy += 1;
            } else {
                clean += 1;
            }
        }
        println!("{mode:?}: {racy} racy, {clean} clean programs");
        // Both outcomes are well represented.
        assert!(racy > 40 && clean > 40, "{mode:?}: {racy} racy, {clean} clean programs");
    }
}
