//! `scalar_program(*inputs) -> outputs` (pure: no token, handle or side
//! effect, so XLA may CSE or drop it): runs the `program` attribute (an
//! int64 array, `mosaic_rt_core::scalar`'s wire format) over rank-0
//! integer/bool operands (and int vectors read by `index`). Called once per
//! group of a kernel's scalar work, often every loop step: no heap, and
//! every operand and result is looked at once.

use crate::dispatch::Call;
use crate::frame::{Buf, Frame};
use mosaic_rt_core::scalar::{DecodeCache, Program, ScalarType, Values};
use mosaic_rt_core::{Result, RtError};
use std::cell::RefCell;

/// Each XLA thread's recently run programs (decoding checks every word) and
/// its scratch values (reused: an evaluation writes each value it reads).
struct State {
    cache: DecodeCache,
    values: Values,
}

thread_local! {
    static STATE: RefCell<State> =
        const { RefCell::new(State { cache: DecodeCache::new(), values: Values::new() }) };
}

/// Programs of at most this many operands keep their operand slices in a
/// small stack array (a bigger one costs more to clear than it saves).
const FEW_INPUTS: usize = 8;

pub fn scalar_program(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let words = f.attr_i64s("program")?;
    STATE.with(|state| {
        let state = &mut *state.borrow_mut();
        run(f, &mut state.cache, &mut state.values, words)
    })
}

fn run(f: &Frame, cache: &mut DecodeCache, values: &mut Values, words: &[i64]) -> Result<()> {
    let program = cache.decode(words)?;
    let (n_in, n_out) = (program.num_inputs(), program.num_outputs());
    f.expect_arity(n_in..=n_in, n_out)?;
    if n_in <= FEW_INPUTS {
        let mut inputs: [&[u8]; FEW_INPUTS] = [&[]; FEW_INPUTS];
        for (i, slot) in inputs.iter_mut().enumerate().take(n_in) {
            *slot = input(f, &program, i)?;
        }
        program.eval_into(values, |i| inputs[i]);
    } else {
        for i in 0..n_in {
            input(f, &program, i)?;
        }
        // Every operand was just checked to be an array of the program's size.
        program.eval_into(values, |i| f.arg(i).and_then(|b| b.bytes()).unwrap_or(&[]));
    }
    for j in 0..n_out {
        let (ty, v) = program.output(values, j);
        let buf = f.ret(j)?;
        expect(f, &buf, ty, &[])?;
        // SAFETY: each result is taken once; XLA aliases no result with an
        // operand (the wrapper declares no aliasing), and no operand slice
        // is used any more.
        ty.write(v, unsafe { buf.bytes_mut()? });
    }
    Ok(())
}

/// Operand `i`'s bytes, checked against the program's type and dims.
fn input<'a>(f: &Frame<'a>, program: &Program, i: usize) -> Result<&'a [u8]> {
    let (ty, dims) = program.input(i);
    let buf = f.arg(i)?;
    expect(f, &buf, ty, dims)?;
    let bytes = buf.bytes()?;
    program.check_input(i, bytes.len())?;
    Ok(bytes)
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
