//! `scalar_program(*inputs) -> outputs` (pure: no token, handle or side
//! effect, so XLA may CSE or drop it): runs the `program` attribute (an
//! int64 array, `mosaic_rt_core::scalar`'s wire format) over rank-0
//! integer/bool operands (and int vectors read by `index`).

use crate::dispatch::Call;
use crate::frame::{Buf, Frame};
use mosaic_rt_core::scalar::{Program, ScalarType};
use mosaic_rt_core::{Result, RtError};

pub fn scalar_program(c: &mut Call) -> Result<()> {
    let f = &c.frame;
    let program = Program::decode(f.attr_i64s("program")?)?;
    let (n_in, n_out) = (program.num_inputs(), program.num_outputs());
    f.expect_arity(n_in..=n_in, n_out)?;
    let mut inputs: Vec<&[u8]> = Vec::with_capacity(n_in);
    for i in 0..n_in {
        let (ty, dims) = program.input(i);
        let buf = f.arg(i)?;
        expect(f, &buf, ty, dims)?;
        inputs.push(buf.bytes()?);
    }
    let mut outputs: Vec<&mut [u8]> = Vec::with_capacity(n_out);
    for j in 0..n_out {
        let buf = f.ret(j)?;
        expect(f, &buf, program.output_type(j), &[])?;
        // SAFETY: each result is taken once; XLA aliases no result with an
        // operand (the wrapper declares no aliasing), so no operand slice
        // above overlaps it.
        outputs.push(unsafe { buf.bytes_mut()? });
    }
    program.run(&inputs, &mut outputs)
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
