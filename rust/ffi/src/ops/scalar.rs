//! `scalar_program(*inputs) -> outputs` (pure: no token, handle or side
//! effect, so XLA may CSE or drop it): runs the `program` attribute (an
//! int64 array, `mosaic_rt_core::scalar`'s wire format) over rank-0
//! integer/bool operands (and int vectors read by `index`). Called once per
//! run of a kernel's index arithmetic, often every loop step: no heap.

use crate::dispatch::Call;
use crate::frame::{Buf, Frame};
use mosaic_rt_core::scalar::{DecodeCache, ScalarType};
use std::cell::RefCell;

thread_local! {
    /// Each XLA thread's recently run programs (decoding checks every word).
    static DECODED: RefCell<DecodeCache> = const { RefCell::new(DecodeCache::new()) };
}
use mosaic_rt_core::{Result, RtError};

pub fn scalar_program(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let words = f.attr_i64s("program")?;
    DECODED.with(|cache| run(f, &mut cache.borrow_mut(), words))
}

fn run(f: &Frame, cache: &mut DecodeCache, words: &[i64]) -> Result<()> {
    let program = cache.decode(words)?;
    let (n_in, n_out) = (program.num_inputs(), program.num_outputs());
    f.expect_arity(n_in..=n_in, n_out)?;
    for i in 0..n_in {
        let (ty, dims) = program.input(i);
        let buf = f.arg(i)?;
        expect(f, &buf, ty, dims)?;
        program.check_input(i, buf.byte_len()?)?;
    }
    for j in 0..n_out {
        expect(f, &f.ret(j)?, program.output_type(j), &[])?;
    }
    // Every operand was just checked to be an array of the program's size.
    let values = program.eval(|i| f.arg(i).and_then(|b| b.bytes()).unwrap_or(&[]));
    for j in 0..n_out {
        let (ty, v) = program.output(&values, j);
        // SAFETY: each result is taken once; XLA aliases no result with an
        // operand (the wrapper declares no aliasing), and no operand slice
        // is alive any more.
        ty.write(v, unsafe { f.ret(j)?.bytes_mut()? });
    }
    Ok(())
}

/// Checks a buffer's dtype and dims against the program's.
fn expect(f: &Frame, buf: &Buf, ty: ScalarType, dims: &[i64]) -> Result<()> {
    buf.expect_dtype(ty.dtype())?;
    if buf.dims != dims {
        return Err(RtError::value(format!(
            "{}: a buffer has shape {:?}, the program expects {dims:?}",
            f.op, buf.dims
        )));
    }
    Ok(())
}
