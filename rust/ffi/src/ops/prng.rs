//! `pltpu.prng_seed` / `prng_random_bits` for the interpreter: real bits
//! from a generator per core, kept in the runtime (stock returns zeros,
//! which tests of dropout or stochastic rounding cannot use).

use super::core_target;
use crate::dispatch::Call;
use crate::launch;
use crate::wire::{prng_random_bits as bits, prng_seed as seed};
use mosaic_rt_core::{DType, Result, RtError};

/// `prng_seed(token, handle, device, core, seeds) -> token` (int32 vector).
pub fn prng_seed(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, seed::arg::FIXED..=seed::arg::FIXED, 1)?;
    let seeds: Vec<i64> = c.frame.arg(seed::arg::seeds)?.i32s()?.iter().map(|&s| s as i64).collect();
    launch::with_runtime(handle, |rt| rt.prng_seed(device, core, &seeds))
}

/// `prng_random_bits(token, handle, device, core) -> (token, bits)`; the
/// result (any 32-bit integer dtype and shape) is filled with random words.
pub fn prng_random_bits(c: &mut Call) -> Result<()> {
    let (handle, device, core) = core_target(c, bits::arg::FIXED..=bits::arg::FIXED, 2)?;
    let out = c.frame.ret(1)?;
    let dtype = out.dtype()?;
    if !matches!(dtype, DType::I32 | DType::U32) {
        return Err(RtError::value(format!("prng_random_bits: result must be int32 or uint32, got {}", dtype.name())));
    }
    // SAFETY: the only slice of result 1, and no operand slice is alive.
    let bytes = unsafe { out.bytes_mut()? };
    let mut words = vec![0u32; bytes.len() / 4];
    launch::with_runtime(handle, |rt| rt.prng_bits(device, core, &mut words))?;
    for (chunk, w) in bytes.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Ok(())
}
