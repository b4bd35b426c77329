//! XLA's algebraic simplifications that change float bits, mirrored.
//!
//! Before codegen XLA rewrites float ops with a constant operand, and the
//! rewritten forms skip the subnormal flush (or are no true division at
//! all). Measured on jax 0.10.2 and 0.12 (`tests/interpret/test_vector_program.py`):
//!
//! * a constant operand of add, mul, max, min moves to the right (which
//!   NaN wins depends on operand order);
//! * `x + ±0`, `x - ±0`, `x * 1`, `x / 1`, `max(x, -inf)`, `min(x, +inf)`,
//!   `max(x, x)`, `min(x, x)` are `x`, unflushed (a signaling NaN too);
//! * `x * -1`, `x / -1`, `-0 - x` are `neg x` (a sign flip, NaN included);
//! * `x - c` is `x + (-c)`; `x / c` is `x * (1/c)`, `1/c` rounded once;
//! * a float convert round trip through a wider float is dropped;
//! * any arithmetic op, max or min with a NaN constant is that NaN,
//!   quieted (negated for `x - NaN`, after the rewrite above);
//! * `select(a > b, a, b)`, `select(a > b, b, a)` and the same with `<`
//!   (strict compares only) become x86 max/min instructions, which flush
//!   the subnormal they return (LLVM's pattern match, not XLA's).
//!
//! Not mirrored (the interpreter should keep these in XLA): subnormal
//! constants, `rem` with a constant operand (a power-of-two divisor is
//! computed differently), instructions of constants only (XLA folds those
//! without flushing subnormals).

use super::meta::VectorValueMeta;
use super::ops::VectorOp;
use super::types::VectorType;

/// What an instruction becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rewrite {
    /// Evaluated as written.
    None,
    /// The value of this earlier value, bits unchanged.
    Alias(u8),
    /// `neg` of this earlier value.
    Neg(u8),
    /// The op with its two arguments swapped.
    Swap,
    /// `x + (-c)` for `x - c` (arguments as written).
    AddNegated,
    /// `x * (1/c)` for `x / c` (arguments as written).
    MulReciprocal,
    /// Every element these bits (an op with a NaN constant is that NaN).
    Fill(u64),
    /// A select whose chosen value is flushed (DAZ): x86's max/min
    /// instructions, which LLVM uses for `select(a > b, a, b)` and kin.
    FlushedSelect,
}

/// A float constant, classified from its bits (a float conversion of a
/// subnormal would depend on the thread's MXCSR).
#[derive(Clone, Copy)]
enum Const {
    /// Its bits.
    Nan(u64),
    Subnormal,
    /// A zero, normal or infinite value (exact as f64).
    Value(f64),
}

/// The constant an earlier value is, if it is a float constant.
fn constant(meta: &[VectorValueMeta], words: &[i64], v: usize) -> Option<Const> {
    let m = meta[v];
    let imm = words[m.const_at? as usize];
    let (bits, exp_mask, mantissa_mask) = match m.ty {
        VectorType::F32 => (imm as u32 as u64, 0x7f80_0000u64, 0x007f_ffffu64),
        VectorType::F64 => (imm as u64, 0x7ff0_0000_0000_0000, 0x000f_ffff_ffff_ffff),
        _ => return None,
    };
    Some(match (bits & exp_mask, bits & mantissa_mask) {
        (e, m) if e == exp_mask && m != 0 => Const::Nan(bits),
        (0, m) if m != 0 => Const::Subnormal,
        _ if m.ty == VectorType::F32 => Const::Value(f32::from_bits(bits as u32) as f64),
        _ => Const::Value(f64::from_bits(bits)),
    })
}

/// The rewrite of instruction `op` of type `ty` with arguments `args`
/// (earlier values, already checked).
pub(super) fn rewrite(op: VectorOp, ty: VectorType, args: &[i64], meta: &[VectorValueMeta], words: &[i64]) -> Rewrite {
    if !ty.is_float() {
        return Rewrite::None;
    }
    if op == VectorOp::SelectN && args.len() == 3 {
        // select_n(p, if_false, if_true) with p = a > b or a < b over the
        // two cases, in either order.
        if let Some((_, a, b)) = meta[args[0] as usize].compare_of {
            let cases = (args[1] as u8, args[2] as u8);
            if cases == (a, b) || cases == (b, a) {
                return Rewrite::FlushedSelect;
            }
        }
        return Rewrite::None;
    }
    if op == VectorOp::Convert {
        // convert(convert(x: T -> wider float) -> T) is x.
        let inner = args[0] as usize;
        if let Some(from) = meta[inner].convert_of {
            if meta[from as usize].ty == ty && ty == VectorType::F32 && meta[inner].ty == VectorType::F64 {
                return Rewrite::Alias(from);
            }
        }
        return Rewrite::None;
    }
    if args.len() != 2 {
        return Rewrite::None;
    }
    let (a, b) = (args[0] as usize, args[1] as usize);
    if a == b && matches!(op, VectorOp::Max | VectorOp::Min) {
        return Rewrite::Alias(a as u8);
    }
    let (ca, cb) = (constant(meta, words, a), constant(meta, words, b));
    let arithmetic = matches!(
        op,
        VectorOp::Add | VectorOp::Sub | VectorOp::Mul | VectorOp::Div | VectorOp::Rem | VectorOp::Max | VectorOp::Min
    );
    if let (true, Some(Const::Nan(bits)), None) | (true, None, Some(Const::Nan(bits))) = (arithmetic, ca, cb) {
        let negated = op == VectorOp::Sub && cb.is_some();
        return Rewrite::Fill(quiet_nan_bits(ty, bits, negated));
    }
    match (ca, cb) {
        (Some(Const::Value(c)), None) => match op {
            VectorOp::Add if c == 0.0 => Rewrite::Alias(b as u8),
            VectorOp::Mul if c == 1.0 => Rewrite::Alias(b as u8),
            VectorOp::Mul if c == -1.0 => Rewrite::Neg(b as u8),
            VectorOp::Max if c == f64::NEG_INFINITY => Rewrite::Alias(b as u8),
            VectorOp::Min if c == f64::INFINITY => Rewrite::Alias(b as u8),
            VectorOp::Add | VectorOp::Mul | VectorOp::Max | VectorOp::Min => Rewrite::Swap,
            VectorOp::Sub if c == 0.0 && c.is_sign_negative() => Rewrite::Neg(b as u8),
            _ => Rewrite::None,
        },
        (None, Some(Const::Value(c))) => match op {
            VectorOp::Add | VectorOp::Sub if c == 0.0 => Rewrite::Alias(a as u8),
            VectorOp::Mul | VectorOp::Div if c == 1.0 => Rewrite::Alias(a as u8),
            VectorOp::Mul | VectorOp::Div if c == -1.0 => Rewrite::Neg(a as u8),
            VectorOp::Max if c == f64::NEG_INFINITY => Rewrite::Alias(a as u8),
            VectorOp::Min if c == f64::INFINITY => Rewrite::Alias(a as u8),
            VectorOp::Sub => Rewrite::AddNegated,
            VectorOp::Div => Rewrite::MulReciprocal,
            _ => Rewrite::None,
        },
        _ => Rewrite::None,
    }
}

/// NaN `bits` of type `ty`, quieted, sign flipped if `negated`.
fn quiet_nan_bits(ty: VectorType, bits: u64, negated: bool) -> u64 {
    let (quiet, sign) = if ty == VectorType::F32 { (1u64 << 22, 1u64 << 31) } else { (1 << 51, 1 << 63) };
    let q = bits | quiet;
    if negated {
        q ^ sign
    } else {
        q
    }
}
