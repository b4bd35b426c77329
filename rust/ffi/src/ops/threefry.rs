//! `threefry2x32(k0, k1, x0, x1) -> (y0, y1)` (pure: no token, handle or
//! side effect): `jax.random`'s Threefry-2x32 hash over uint32 arrays, one
//! native call where XLA would compile the 20 unrolled rounds as fusions.
//! Each operand holds one element (broadcast) or as many as the results.

use crate::dispatch::Call;
use crate::frame::Buf;
use crate::wire::threefry2x32 as wire;
use mosaic_rt_core::{DType, Result, RtError};
use mosaic_rt_programs::threefry::{hash_all, Words};

pub fn threefry2x32(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    f.expect_arity(wire::arg::FIXED..=wire::arg::FIXED, 2)?;
    let (r0, r1) = (f.ret(0)?, f.ret(1)?);
    r0.expect_dtype(DType::U32)?;
    r1.expect_dtype(DType::U32)?;
    let n = r0.num_elements();
    if r1.num_elements() != n {
        return Err(RtError::value(format!("{}: the two results differ in size", f.op)));
    }
    let mut words: [Vec<u32>; 4] = Default::default();
    for (i, slot) in words.iter_mut().enumerate() {
        let buf = f.arg(i)?;
        buf.expect_dtype(DType::U32)?;
        if buf.num_elements() != 1 && buf.num_elements() != n {
            return Err(RtError::value(format!(
                "{}: operand {i} has {} elements, expected 1 or {n}",
                f.op,
                buf.num_elements()
            )));
        }
        *slot = u32s(&buf)?;
    }
    // SAFETY: called once per result; XLA gives each result a buffer of its
    // own that no operand overlaps (the wrapper declares no aliasing), so
    // these are the only references to that memory.
    let (b0, b1) = unsafe { (r0.bytes_mut()?, r1.bytes_mut()?) };
    let (mut y0, mut y1) = (vec![0u32; n], vec![0u32; n]);
    let [k0, k1, x0, x1] = [0, 1, 2, 3].map(|i| operand(&words[i], n));
    let ok = hash_all(k0, k1, x0, x1, &mut y0, &mut y1);
    debug_assert!(ok, "operand sizes are checked above");
    for (out, ys) in [(b0, y0), (b1, y1)] {
        for (chunk, y) in out.chunks_exact_mut(4).zip(ys) {
            chunk.copy_from_slice(&y.to_ne_bytes());
        }
    }
    Ok(())
}

/// A uint32 operand's elements (XLA's buffers are native-endian).
fn u32s(buf: &Buf) -> Result<Vec<u32>> {
    Ok(buf.bytes()?.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// One element broadcasts; otherwise one per result element.
fn operand(w: &[u32], n: usize) -> Words<'_> {
    if w.len() == 1 && n != 1 {
        Words::One(w[0])
    } else {
        Words::Each(w)
    }
}
