//! Direct output buffers: XLA's result memory of an output, written in
//! place for one launch (no copy-out at kernel end), with the fill values
//! in every byte the kernel never wrote, and a loud error when kernel end
//! receives other memory than the kernel wrote.

mod memory_support;

use memory_support::*;
use mosaic_rt_core::{
    BufferKey, Config, DType, DimSel, ErrorKind, FillMode, MemRef, MemorySpace, OobReads, Region, Runtime,
};

const HBM: MemorySpace = MemorySpace::Hbm;
const NAN: [u8; 4] = f32::NAN.to_ne_bytes();

fn runtime() -> Runtime {
    Runtime::new(Config { num_devices: 1, cores_per_device: 1, fill: FillMode::Nan, ..Config::default() }).unwrap()
}

fn range(v: &[u8]) -> (usize, usize) {
    (v.as_ptr() as usize, v.len())
}

/// `rows` rows of 4 f32 written at row `at` of the buffer.
fn rows(at: usize, n: usize) -> Region {
    slices(&[(at, n), (0, 4)])
}

/// `(start, size)` per leading dim, stride 1.
fn slices(dims: &[(usize, usize)]) -> Region {
    Region::new(dims.iter().map(|&(start, size)| DimSel::slice(start as i64, size as i64, 1)).collect())
}

#[test]
fn an_output_is_written_in_xla_memory_and_the_rest_filled_at_kernel_end() {
    let rt = runtime();
    // 4 x 4 f32 of XLA's garbage.
    let mut xla = vec![0xABu8; 4 * 4 * 4];
    // SAFETY: `xla` outlives `rt` and nothing else touches it until
    // `finish_direct_outputs` below.
    let id = unsafe { rt.allocate_direct_output(0, DType::F32, &[4, 4], xla.as_mut_ptr(), xla.len(), false) }.unwrap();
    rt.store(MemRef::new(0, 0, HBM, id, &rows(1, 2)), &[7u8; 32]).unwrap();
    let mut back = [0u8; 64];
    rt.load(MemRef::new(0, 0, HBM, id, &Region::full()), &mut back).unwrap();
    rt.finish_direct_outputs(0, &[range(&xla)]).unwrap();
    for (row, chunk) in xla.chunks(16).enumerate() {
        let want: Vec<u8> = match row {
            1 | 2 => vec![7; 16],
            _ => NAN.repeat(4),
        };
        assert_eq!(chunk, &want[..], "row {row}");
    }
    assert_eq!(&back[..], &xla[..], "loads saw the same bytes");
    let e = rt.load(MemRef::new(0, 0, HBM, id, &Region::full()), &mut back).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "the memory is XLA's again: {e}");
}

#[test]
fn an_output_holding_its_aliased_inputs_value_keeps_every_unwritten_byte() {
    let rt = runtime();
    // XLA put the input aliased to this output in its memory.
    let mut xla: Vec<u8> = (0..64).collect();
    let input = xla.clone();
    // SAFETY: `xla` outlives `rt` and nothing else touches it until
    // `finish_direct_outputs` below.
    let id = unsafe { rt.allocate_direct_output(0, DType::F32, &[4, 4], xla.as_mut_ptr(), xla.len(), true) }.unwrap();
    let mut back = [0u8; 64];
    rt.load(MemRef::new(0, 0, HBM, id, &Region::full()), &mut back).unwrap();
    assert_eq!(&back[..], &input[..], "it starts as the input");
    rt.store(MemRef::new(0, 0, HBM, id, &rows(2, 1)), &[9u8; 16]).unwrap();
    rt.finish_direct_outputs(0, &[range(&xla)]).unwrap();
    for (row, chunk) in xla.chunks(16).enumerate() {
        let want = if row == 2 { vec![9; 16] } else { input[row * 16..][..16].to_vec() };
        assert_eq!(chunk, &want[..], "row {row}: no fill values");
    }
}

#[test]
fn a_write_of_the_whole_output_skips_the_fill() {
    let mem = table(1, 1, OobReads::Raise, FillMode::Zero);
    let mut xla = vec![0xABu8; 16];
    // SAFETY: `xla` outlives `mem` and nothing else touches it until
    // `finish_direct_outputs` below.
    let id = unsafe { mem.allocate_direct(0, DType::U8, &[16], xla.as_mut_ptr(), xla.len(), false) }.unwrap();
    let key = BufferKey { space: HBM, id, device: 0, core: 0 };
    assert_eq!(mem.info(key).unwrap().ref_count, 1);
    let data: Vec<u8> = (0..16).collect();
    mem.store(MemRef::new(0, 0, HBM, id, &Region::full()), &data).unwrap();
    mem.finish_direct_outputs(0, &[range(&xla)]).unwrap();
    assert_eq!(xla, data);
}

#[test]
fn other_memory_at_kernel_end_is_an_internal_error_and_nothing_more_is_written() {
    let rt = runtime();
    let mut xla = vec![0xABu8; 16];
    let elsewhere = vec![0u8; 16];
    // SAFETY: `xla` outlives `rt` and nothing else touches it until the
    // borrow ends (`finish_direct_outputs` ends it on the mismatch too).
    let id = unsafe { rt.allocate_direct_output(0, DType::U8, &[16], xla.as_mut_ptr(), xla.len(), false) }.unwrap();
    let e = rt.finish_direct_outputs(0, &[range(&elsewhere)]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    assert!(e.message.contains("XLA copied an output"), "{e}");
    rt.leave_device(0).unwrap();
    assert_eq!(xla, vec![0xAB; 16], "no fill after the mismatch: the memory may be XLA's");
    let e = rt.store(MemRef::new(0, 0, HBM, id, &slices(&[(0, 4)])), &[1; 4]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "nor any later write: {e}");
}

#[test]
fn outputs_are_matched_in_allocation_order() {
    let rt = runtime();
    let (mut a, mut b) = (vec![0u8; 8], vec![0u8; 8]);
    // SAFETY: `a` and `b` outlive `rt`; nothing else touches them until
    // the borrows end (`finish_direct_outputs`, or `leave_device`).
    unsafe {
        rt.allocate_direct_output(0, DType::U8, &[8], a.as_mut_ptr(), 8, false).unwrap();
        rt.allocate_direct_output(0, DType::U8, &[8], b.as_mut_ptr(), 8, false).unwrap();
    }
    let e = rt.finish_direct_outputs(0, &[range(&b), range(&a)]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
    let rt = runtime();
    // SAFETY: as above.
    unsafe { rt.allocate_direct_output(0, DType::U8, &[8], a.as_mut_ptr(), 8, false).unwrap() };
    let e = rt.finish_direct_outputs(0, &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "a missing output is a mismatch too: {e}");
    let rt = runtime();
    // SAFETY: as above.
    unsafe {
        rt.allocate_direct_output(0, DType::U8, &[8], a.as_mut_ptr(), 8, false).unwrap();
        rt.allocate_direct_output(0, DType::U8, &[8], b.as_mut_ptr(), 8, false).unwrap();
    }
    rt.finish_direct_outputs(0, &[range(&a), range(&b)]).unwrap();
}

#[test]
fn leaving_without_kernel_end_never_writes_xla_memory() {
    let rt = runtime();
    let mut xla = vec![0xABu8; 16];
    // SAFETY: `xla` outlives `rt`; the borrow ends in `leave_device`.
    let id = unsafe { rt.allocate_direct_output(0, DType::U8, &[16], xla.as_mut_ptr(), 16, false) }.unwrap();
    rt.leave_device(0).unwrap();
    assert_eq!(xla, vec![0xAB; 16], "a failed launch leaves the pending fill unwritten");
    let e = rt.store(MemRef::new(0, 0, HBM, id, &Region::full()), &[1; 16]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
}

#[test]
fn a_direct_output_has_the_results_size() {
    let rt = runtime();
    let mut xla = vec![0u8; 12];
    // SAFETY: the call fails before borrowing.
    let e = unsafe { rt.allocate_direct_output(0, DType::F32, &[4], xla.as_mut_ptr(), xla.len(), false) }.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal, "{e}");
}
