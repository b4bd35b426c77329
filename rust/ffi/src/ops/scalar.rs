//! `scalar_program(*inputs) -> outputs` (pure: no token, handle or side
//! effect, so XLA may CSE or drop it): runs the `program` attribute (an
//! int64 array, `mosaic_rt_programs::scalar`'s wire format) over rank-0
//! integer/bool operands (and int vectors read by `index`). Called once per
//! group of a kernel's scalar work, often every loop step: no heap, and
//! every operand and result is looked at once.

use crate::dispatch::Call;
use crate::frame::{dtype_to_xla, Buf, Frame};
use crate::wire::scalar_program as wire;
use mosaic_rt_core::{DType, Result, RtError};
use mosaic_rt_programs::scalar::{ScalarProgram, ScalarProgramState, ScalarType, Values};
use std::cell::RefCell;

thread_local! {
    /// Each XLA thread's recently run programs (decoding checks every word) and
    /// its scratch values (reused: an evaluation writes each value it reads).
    static STATE: RefCell<ScalarProgramState> = const { RefCell::new(ScalarProgramState::new(Values::new())) };
}

/// Programs of at most this many operands keep their operand slices in a
/// small stack array (a bigger one costs more to clear than it saves).
const FEW_INPUTS: usize = 8;

pub fn scalar_program(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let words = f.attr_i64s(wire::attr::program)?;
    let fingerprint = f.attr_i64_opt(wire::attr::fingerprint)?;
    STATE.with(|state| state.borrow_mut().run(words, fingerprint.map(|fp| fp as u64), |p, values| run(f, p, values)))
}

fn run(f: &Frame, program: &ScalarProgram, values: &mut Values) -> Result<()> {
    let (n_in, n_out) = (program.num_inputs(), program.num_outputs());
    f.expect_arity(n_in..=n_in, n_out)?;
    if n_in <= FEW_INPUTS {
        let mut inputs: [&[u8]; FEW_INPUTS] = [&[]; FEW_INPUTS];
        for (i, slot) in inputs.iter_mut().enumerate().take(n_in) {
            *slot = input(f, program, i)?;
        }
        program.eval_into(values, |i| inputs[i]);
    } else {
        for i in 0..n_in {
            input(f, program, i)?;
        }
        // Every operand was just checked to be an array of the program's size.
        program.eval_into(values, |i| f.arg(i).and_then(|b| b.bytes()).unwrap_or(&[]));
    }
    for j in 0..n_out {
        let (ty, v) = program.output(values, j);
        let buf = f.ret(j)?;
        expect(f, &buf, ty, &[])?;
        let word = ty.bytes(v);
        // SAFETY: `f.ret` checked the data pointer is non-null, and `expect`
        // that the buffer is one element of `ty`: XLA gives it `ty.size()`
        // writable bytes. Each result is written once; XLA aliases no result
        // with an operand (the wrapper declares no aliasing), and no operand
        // slice is used any more.
        unsafe { std::ptr::copy_nonoverlapping(word.as_ptr(), buf.data as *mut u8, ty.size()) };
    }
    Ok(())
}

/// Operand `i`'s bytes, checked against the program's type and dims.
fn input<'a>(f: &Frame<'a>, program: &ScalarProgram, i: usize) -> Result<&'a [u8]> {
    let (ty, dims) = program.input(i);
    let buf = f.arg(i)?;
    expect(f, &buf, ty, dims)?;
    let n: usize = dims.iter().map(|&d| d as usize).product();
    // SAFETY: `f.arg` checked the data pointer is non-null, and `expect` that
    // the buffer is `dims` (each >= 1, checked at decode) elements of `ty`:
    // XLA gives it `n * ty.size()` bytes, unchanged during the call.
    Ok(unsafe { std::slice::from_raw_parts(buf.data as *const u8, n * ty.size()) })
}

/// Checks a buffer's dtype and dims against the program's (XLA's dtype
/// code compared directly: this runs for every operand of every call).
fn expect(f: &Frame, buf: &Buf, ty: ScalarType, dims: &[i64]) -> Result<()> {
    if buf.dtype != dtype_to_xla(DType::from(ty)) {
        buf.expect_dtype(DType::from(ty))?; // the error naming both
    }
    // Not `buf.dims != dims`: that calls libc's memcmp, whose AVX-512
    // variant has a fixed cost even for the empty dims of a scalar here
    // (benches/PERFORMANCE.md, "Scalar and view copies").
    if buf.dims.len() != dims.len() || buf.dims.iter().zip(dims).any(|(a, b)| a != b) {
        return Err(RtError::value(format!(
            "{}: a buffer has shape {:?}, the program expects {dims:?}",
            f.op, buf.dims
        )));
    }
    Ok(())
}
