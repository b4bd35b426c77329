//! `vector_program(*inputs) -> outputs` (pure: no token, handle or side
//! effect, so XLA may CSE or drop it): runs the `program` attribute (an
//! int64 array, `mosaic_rt_programs::vector`'s wire format) over arrays of n
//! elements (any shape, C order) and rank-0 scalars. One call evaluates a
//! kernel block's elementwise compute, which XLA would otherwise compile
//! as fusions.

use crate::dispatch::Call;
use crate::frame::{dtype_to_xla, Buf, Frame};
use crate::wire::vector_program as wire;
use mosaic_rt_core::{DType, Result, RtError};
use mosaic_rt_programs::vector::{VectorProgram, VectorProgramState, VectorScratch, VectorType, MAX_VALUES};
use std::cell::RefCell;

thread_local! {
    /// Each XLA thread's recently run programs (decoding checks every word) and
    /// its scratch (grown once, reused by every call on the thread).
    static STATE: RefCell<VectorProgramState> = const { RefCell::new(VectorProgramState::new(VectorScratch::new())) };
}

pub fn vector_program(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let words = f.attr_i64s(wire::attr::program)?;
    let fingerprint = f.attr_i64_opt(wire::attr::fingerprint)?;
    STATE.with(|state| state.borrow_mut().run(words, fingerprint.map(|fp| fp as u64), |p, scratch| run(f, p, scratch)))
}

fn run(f: &Frame, program: &VectorProgram, scratch: &mut VectorScratch) -> Result<()> {
    let (n_in, n_out) = (program.num_inputs(), program.num_outputs());
    f.expect_arity(n_in..=n_in, n_out)?;
    let mut inputs: [&[u8]; MAX_VALUES] = [&[]; MAX_VALUES];
    for (i, slot) in inputs.iter_mut().enumerate().take(n_in) {
        let (ty, scalar) = program.input(i);
        let buf = f.arg(i)?;
        expect(f, &buf, "operand", i, ty, scalar, program.len())?;
        *slot = buf.bytes()?;
    }
    let mut outputs: [&mut [u8]; MAX_VALUES] = std::array::from_fn(|_| <&mut [u8]>::default());
    for (j, slot) in outputs.iter_mut().enumerate().take(n_out) {
        let buf = f.ret(j)?;
        // A scalar result may come back rank-0 (a one-element value of the kernel).
        let rank0 = program.output_is_scalar(j) && buf.dims.is_empty();
        expect(f, &buf, "result", j, program.output_type(j), rank0, program.len())?;
        // SAFETY: called once per result; XLA gives each result a buffer of
        // its own that no operand overlaps (the wrapper declares no
        // aliasing; as a `batch` member, its operands are the batch's or
        // earlier members' results, never its own), so this slice is the
        // only reference to that memory.
        *slot = unsafe { buf.bytes_mut()? };
    }
    Ok(program.run(&inputs[..n_in], &mut outputs[..n_out], scratch)?)
}

/// Checks a buffer's dtype and size: a scalar is one element of any shape
/// (a `(1, 1)` block's value, maybe still a `batch` member's result, which
/// the wrapper cannot reshape), an array any shape of exactly `n` elements.
fn expect(f: &Frame, buf: &Buf, what: &str, k: usize, ty: VectorType, scalar: bool, n: usize) -> Result<()> {
    if buf.dtype != dtype_to_xla(DType::from(ty)) {
        buf.expect_dtype(DType::from(ty))?; // the error naming both
    }
    let ok = if scalar { buf.num_elements() == 1 } else { buf.num_elements() == n };
    if !ok {
        let want = if scalar { "one element".to_string() } else { format!("{n} elements") };
        return Err(RtError::value(format!(
            "{}: {what} {k} has shape {:?}, the vector program expects {want} of {}",
            f.op,
            buf.dims,
            ty.name()
        )));
    }
    Ok(())
}
