//! The ops of scalar programs, each with XLA:CPU's exact integer semantics
//! (checked against XLA on jax 0.10 and 0.12, not assumed): wrapping
//! add/sub/mul/neg/abs/pow; `x / 0` is -1 (all ones unsigned), `x % 0` is
//! `x`, `MIN / -1` is `MIN` and `MIN % -1` is 0; a shift by an amount that
//! is out of range *as an unsigned number of the type's width* gives 0
//! (left, logical right) or the sign fill (arithmetic right, which treats
//! unsigned types as two's complement too); `clamp(lo, x, hi)` is
//! `min(max(x, lo), hi)`; an int32 `select_n` index is clamped to the cases.
//! Values are canonical `u64`s (see `types`).

use super::types::{sign_extend, ScalarType};
use mosaic_rt_wire::wire_enum;

wire_enum! {
    /// One op of scalar programs: wire code and name (jax's primitive name
    /// where there is one).
    pub enum ScalarOp as listed "op" {
        Const = 0 => "const",
        Add = 1 => "add",
        Sub = 2 => "sub",
        Mul = 3 => "mul",
        Div = 4 => "div",
        Rem = 5 => "rem",
        Neg = 6 => "neg",
        Abs = 7 => "abs",
        Sign = 8 => "sign",
        Max = 9 => "max",
        Min = 10 => "min",
        Clamp = 11 => "clamp",
        And = 12 => "and",
        Or = 13 => "or",
        Xor = 14 => "xor",
        Not = 15 => "not",
        ShiftLeft = 16 => "shift_left",
        ShiftRightArithmetic = 17 => "shift_right_arithmetic",
        ShiftRightLogical = 18 => "shift_right_logical",
        Eq = 19 => "eq",
        Ne = 20 => "ne",
        Lt = 21 => "lt",
        Le = 22 => "le",
        Gt = 23 => "gt",
        Ge = 24 => "ge",
        SelectN = 25 => "select_n",
        Convert = 26 => "convert_element_type",
        IntegerPow = 27 => "integer_pow",
        Index = 28 => "index",
    }
}

impl ScalarOp {
    /// Whether the op compares (its result is bool, its operands any type).
    pub fn is_comparison(self) -> bool {
        matches!(self, ScalarOp::Eq | ScalarOp::Ne | ScalarOp::Lt | ScalarOp::Le | ScalarOp::Gt | ScalarOp::Ge)
    }
}

/// `a op b` for a binary op of type `t` (comparisons return 0 or 1).
#[inline]
pub fn binary(op: ScalarOp, t: ScalarType, a: u64, b: u64) -> u64 {
    let (x, y) = (t.to_i128(a), t.to_i128(b));
    match op {
        ScalarOp::Add => t.wrap(a.wrapping_add(b)),
        ScalarOp::Sub => t.wrap(a.wrapping_sub(b)),
        ScalarOp::Mul => t.wrap(a.wrapping_mul(b)),
        ScalarOp::Div => div(t, a, b),
        ScalarOp::Rem => rem(t, a, b),
        ScalarOp::Max => {
            if x >= y {
                a
            } else {
                b
            }
        }
        ScalarOp::Min => {
            if x <= y {
                a
            } else {
                b
            }
        }
        // Canonical forms are closed under the bitwise ops (bool: 0/1).
        ScalarOp::And => a & b,
        ScalarOp::Or => a | b,
        ScalarOp::Xor => a ^ b,
        ScalarOp::ShiftLeft => shift(t, a, b, |v, s| v << s, 0),
        ScalarOp::ShiftRightLogical => shift(t, a, b, |v, s| (v & mask(t)) >> s, 0),
        ScalarOp::ShiftRightArithmetic => {
            let signed = sign_extend(a, t.width());
            let fill = ((signed as i64) >> 63) as u64;
            shift(t, signed, b, |v, s| ((v as i64) >> s) as u64, fill)
        }
        ScalarOp::Eq => (a == b) as u64,
        ScalarOp::Ne => (a != b) as u64,
        ScalarOp::Lt => (x < y) as u64,
        ScalarOp::Le => (x <= y) as u64,
        ScalarOp::Gt => (x > y) as u64,
        ScalarOp::Ge => (x >= y) as u64,
        _ => unreachable!("{op:?} is not binary"),
    }
}

/// The all-ones pattern of `t`'s width.
fn mask(t: ScalarType) -> u64 {
    match t.width() {
        64 => u64::MAX,
        w => (1u64 << w) - 1,
    }
}

/// A shift: amounts outside `0..width` (read as unsigned) give `t.wrap(fill)`.
#[inline]
fn shift(t: ScalarType, a: u64, amount: u64, f: impl Fn(u64, u32) -> u64, fill: u64) -> u64 {
    let amount = amount & mask(t);
    if amount >= t.width() as u64 {
        return t.wrap(fill);
    }
    t.wrap(f(a, amount as u32))
}

fn div(t: ScalarType, a: u64, b: u64) -> u64 {
    if b == 0 {
        return t.wrap(u64::MAX); // -1 signed, all ones unsigned
    }
    if t.is_signed() {
        // i64 division of canonical values never overflows except
        // i64::MIN / -1, which XLA defines as MIN (as wrapping_div does).
        t.wrap((a as i64).wrapping_div(b as i64) as u64)
    } else {
        a / b
    }
}

fn rem(t: ScalarType, a: u64, b: u64) -> u64 {
    if b == 0 {
        return a;
    }
    if t.is_signed() {
        t.wrap((a as i64).wrapping_rem(b as i64) as u64)
    } else {
        a % b
    }
}

/// `op a` for a unary op of type `t` (`Not` of bool is logical).
#[inline]
pub fn unary(op: ScalarOp, t: ScalarType, a: u64) -> u64 {
    match op {
        ScalarOp::Neg => t.wrap(a.wrapping_neg()),
        ScalarOp::Abs if t.is_signed() => t.wrap((a as i64).wrapping_abs() as u64),
        ScalarOp::Abs => a,
        ScalarOp::Sign if t.is_signed() => t.wrap((a as i64).signum() as u64),
        ScalarOp::Sign => (a != 0) as u64,
        ScalarOp::Not if t == ScalarType::Bool => a ^ 1,
        ScalarOp::Not => t.wrap(!a),
        _ => unreachable!("{op:?} is not unary"),
    }
}

/// `min(max(x, lo), hi)`, as XLA's clamp (so `lo > hi` gives `hi`).
#[inline]
pub fn clamp(t: ScalarType, lo: u64, x: u64, hi: u64) -> u64 {
    binary(ScalarOp::Min, t, binary(ScalarOp::Max, t, x, lo), hi)
}

/// `a` of type `from` converted to `to`: to bool is `a != 0`; between
/// integers the two's-complement wrap (bool is 0 or 1).
#[inline]
pub fn convert(to: ScalarType, a: u64) -> u64 {
    match to {
        ScalarType::Bool => (a != 0) as u64,
        _ => to.wrap(a),
    }
}

/// `a ** y` (wrapping, by squaring; `y >= 0`, checked at decode).
#[inline]
pub fn integer_pow(t: ScalarType, a: u64, y: u64) -> u64 {
    let (mut base, mut y, mut acc) = (a, y, 1u64);
    while y > 0 {
        if y & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        y >>= 1;
    }
    t.wrap(acc)
}

/// The case `select_n` picks: a bool picks case 0 (false) or 1 (true); an
/// int32 index is clamped to `0..n`, as XLA's tree of selects does.
#[inline]
pub fn select_case(which_type: ScalarType, which: u64, n: usize) -> usize {
    let i = which_type.to_i128(which);
    i.clamp(0, n as i128 - 1) as usize
}

/// The element a size-1 `dynamic_slice` at `start` reads from a dimension
/// of size `dim >= 1`: XLA clamps the start into `0..dim`.
#[inline]
pub fn clamp_start(start: u64, dim: usize) -> usize {
    (start as i32 as i64).clamp(0, dim as i64 - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarType::*;

    fn s(t: ScalarType, v: i64) -> u64 {
        t.wrap(v as u64)
    }

    fn bin(op: ScalarOp, t: ScalarType, a: i64, b: i64) -> i64 {
        let r = binary(op, t, s(t, a), s(t, b));
        if t.is_signed() {
            r as i64
        } else {
            assert_eq!(t.wrap(r), r, "result not canonical");
            r as i64
        }
    }

    #[test]
    fn codes_round_trip() {
        for op in ScalarOp::ALL {
            assert_eq!(ScalarOp::from_code(op.code()).unwrap(), op);
            assert_eq!(ScalarOp::from_name(op.name()).unwrap(), op);
        }
        assert!(ScalarOp::from_code(ScalarOp::ALL.len() as i64).is_err());
        assert!(ScalarOp::from_code(-1).is_err());
    }

    #[test]
    fn add_sub_mul_wrap() {
        assert_eq!(bin(ScalarOp::Add, I8, 127, 1), -128);
        assert_eq!(bin(ScalarOp::Sub, I8, -128, 1), 127);
        assert_eq!(bin(ScalarOp::Mul, I16, 300, 300), (90000i64 as i16) as i64);
        assert_eq!(bin(ScalarOp::Add, U8, 255, 1), 0);
        assert_eq!(bin(ScalarOp::Sub, U32, 0, 1), u32::MAX as i64);
        assert_eq!(bin(ScalarOp::Mul, I64, i64::MAX, 2), -2);
        assert_eq!(binary(ScalarOp::Add, U64, u64::MAX, 2), 1);
    }

    #[test]
    fn div_rem_edge_cases_match_xla() {
        // Measured on XLA:CPU: x/0 = -1, MIN/-1 = MIN, x%0 = x, MIN%-1 = 0.
        for t in [I8, I16, I32, I64] {
            let min = t.min_max().0 as i64;
            let max = t.min_max().1 as i64;
            assert_eq!(bin(ScalarOp::Div, t, min, -1), min, "{t:?}");
            assert_eq!(bin(ScalarOp::Rem, t, min, -1), 0, "{t:?}");
            assert_eq!(bin(ScalarOp::Div, t, max, 0), -1, "{t:?}");
            assert_eq!(bin(ScalarOp::Div, t, 0, 0), -1, "{t:?}");
            assert_eq!(bin(ScalarOp::Rem, t, max, 0), max, "{t:?}");
            assert_eq!(bin(ScalarOp::Rem, t, -7, 0), -7, "{t:?}");
            assert_eq!(bin(ScalarOp::Div, t, -7, 2), -3, "truncates, {t:?}");
            assert_eq!(bin(ScalarOp::Rem, t, -7, 2), -1, "sign of the dividend, {t:?}");
            assert_eq!(bin(ScalarOp::Rem, t, 7, -2), 1, "{t:?}");
        }
        for t in [U8, U16, U32, U64] {
            let max = t.min_max().1;
            assert_eq!(binary(ScalarOp::Div, t, 7, 0), max, "{t:?}");
            assert_eq!(binary(ScalarOp::Rem, t, 7, 0), 7, "{t:?}");
            assert_eq!(binary(ScalarOp::Div, t, max, 3), max / 3, "{t:?}");
            assert_eq!(binary(ScalarOp::Rem, t, max, 2), 1, "{t:?}");
        }
    }

    #[test]
    fn shifts_match_xla_out_of_range() {
        for t in [I8, I16, I32, I64] {
            let w = t.width() as i64;
            assert_eq!(bin(ScalarOp::ShiftLeft, t, -5, 1), -10);
            assert_eq!(bin(ScalarOp::ShiftLeft, t, -5, w - 1), t.min_max().0 as i64);
            assert_eq!(bin(ScalarOp::ShiftLeft, t, -5, w), 0);
            assert_eq!(bin(ScalarOp::ShiftLeft, t, -5, -1), 0, "negative amounts are huge unsigned ones");
            assert_eq!(bin(ScalarOp::ShiftRightArithmetic, t, -5, 1), -3);
            assert_eq!(bin(ScalarOp::ShiftRightArithmetic, t, -5, w), -1);
            assert_eq!(bin(ScalarOp::ShiftRightArithmetic, t, 5, w + 1), 0);
            assert_eq!(bin(ScalarOp::ShiftRightArithmetic, t, -5, -1), -1);
            assert_eq!(bin(ScalarOp::ShiftRightLogical, t, -5, w), 0);
            assert_eq!(bin(ScalarOp::ShiftRightLogical, t, -1, w - 1), 1);
            assert_eq!(bin(ScalarOp::ShiftRightLogical, t, -1, 0), -1);
        }
        // Arithmetic right shifts of unsigned types fill with the top bit.
        assert_eq!(binary(ScalarOp::ShiftRightArithmetic, U8, 0xc8, 1), 0xe4);
        assert_eq!(binary(ScalarOp::ShiftRightArithmetic, U8, 0xc8, 9), 0xff);
        assert_eq!(binary(ScalarOp::ShiftRightArithmetic, U32, 200, 1), 100);
        assert_eq!(binary(ScalarOp::ShiftRightArithmetic, U64, 1 << 63, 63), u64::MAX);
        assert_eq!(binary(ScalarOp::ShiftRightLogical, U8, 200, 1), 100);
        assert_eq!(binary(ScalarOp::ShiftLeft, U8, 200, 1), 144);
        assert_eq!(binary(ScalarOp::ShiftLeft, U8, 200, 8), 0);
        assert_eq!(binary(ScalarOp::ShiftLeft, U64, 1, 63), 1 << 63);
        assert_eq!(binary(ScalarOp::ShiftLeft, U64, 1, 64), 0);
    }

    #[test]
    fn comparisons_signed_and_unsigned() {
        assert_eq!(bin(ScalarOp::Lt, I32, -1, 0), 1);
        assert_eq!(binary(ScalarOp::Lt, U32, u32::MAX as u64, 0), 0);
        assert_eq!(binary(ScalarOp::Gt, U64, 1 << 63, 1), 1);
        assert_eq!(bin(ScalarOp::Gt, I64, i64::MIN, 1), 0);
        assert_eq!(bin(ScalarOp::Le, I8, 3, 3), 1);
        assert_eq!(bin(ScalarOp::Ge, I8, 2, 3), 0);
        assert_eq!(bin(ScalarOp::Eq, I16, -1, -1), 1);
        assert_eq!(bin(ScalarOp::Ne, I16, -1, -1), 0);
        assert_eq!(binary(ScalarOp::Lt, Bool, 0, 1), 1);
    }

    #[test]
    fn min_max_clamp() {
        assert_eq!(bin(ScalarOp::Max, I32, -3, 2), 2);
        assert_eq!(bin(ScalarOp::Min, I32, -3, 2), -3);
        assert_eq!(binary(ScalarOp::Max, U32, u32::MAX as u64, 2), u32::MAX as u64);
        assert_eq!(binary(ScalarOp::Max, Bool, 1, 0), 1);
        assert_eq!(binary(ScalarOp::Min, Bool, 1, 0), 0);
        // XLA: lo > hi gives hi.
        assert_eq!(clamp(I32, 5, 1, 2), 2);
        assert_eq!(clamp(I32, 5, 9, 2), 2);
        assert_eq!(clamp(I32, 0, s(I32, -4), 3), 0);
        assert_eq!(clamp(I32, 0, 2, 3), 2);
        assert_eq!(clamp(U8, 1, 250, 9), 9);
    }

    #[test]
    fn unary_ops() {
        let min8 = I8.min_max().0;
        assert_eq!(unary(ScalarOp::Neg, I8, min8), min8);
        assert_eq!(unary(ScalarOp::Abs, I8, min8), min8);
        assert_eq!(unary(ScalarOp::Abs, I32, s(I32, -7)), 7);
        assert_eq!(unary(ScalarOp::Abs, I64, i64::MIN as u64), i64::MIN as u64);
        assert_eq!(unary(ScalarOp::Sign, I8, min8), s(I8, -1));
        assert_eq!(unary(ScalarOp::Sign, I32, 0), 0);
        assert_eq!(unary(ScalarOp::Sign, I32, 9), 1);
        assert_eq!(unary(ScalarOp::Sign, U8, 200), 1);
        assert_eq!(unary(ScalarOp::Sign, U64, 0), 0);
        assert_eq!(unary(ScalarOp::Neg, U8, 7), 249);
        assert_eq!(unary(ScalarOp::Neg, U64, 1), u64::MAX);
        assert_eq!(unary(ScalarOp::Not, Bool, 1), 0);
        assert_eq!(unary(ScalarOp::Not, Bool, 0), 1);
        assert_eq!(unary(ScalarOp::Not, U8, 0), 255);
        assert_eq!(unary(ScalarOp::Not, I16, 0), s(I16, -1));
    }

    #[test]
    fn bitwise_ops_keep_canonical_form() {
        assert_eq!(bin(ScalarOp::And, I8, -1, 0x0f), 0x0f);
        assert_eq!(bin(ScalarOp::Or, I8, 0x70, -128), -16);
        assert_eq!(bin(ScalarOp::Xor, I8, -1, 1), -2);
        assert_eq!(binary(ScalarOp::Xor, U16, 0xffff, 1), 0xfffe);
        assert_eq!(binary(ScalarOp::And, Bool, 1, 0), 0);
        assert_eq!(binary(ScalarOp::Or, Bool, 1, 0), 1);
        assert_eq!(binary(ScalarOp::Xor, Bool, 1, 1), 0);
    }

    #[test]
    fn conversions() {
        assert_eq!(convert(I8, 300), 44);
        assert_eq!(convert(I8, s(I64, -129)), 127);
        assert_eq!(convert(I8, u64::MAX), s(I8, -1), "uint64 max -> int8 -1");
        assert_eq!(convert(U32, s(I8, -1)), u32::MAX as u64);
        assert_eq!(convert(I32, 200), 200, "uint8 200 widens unsigned");
        assert_eq!(convert(Bool, s(I32, -5)), 1);
        assert_eq!(convert(Bool, 0), 0);
        assert_eq!(convert(Bool, 1 << 40), 1, "any set bit is true, not just the low ones");
        assert_eq!(convert(U8, 1), 1, "true -> 1");
    }

    #[test]
    fn integer_pow_wraps() {
        assert_eq!(integer_pow(I8, s(I8, -7), 3), s(I8, -343));
        assert_eq!(integer_pow(I8, I8.min_max().0, 3), 0);
        assert_eq!(integer_pow(U8, 250, 3), 40);
        assert_eq!(integer_pow(I32, s(I32, -1), 3), s(I32, -1));
        assert_eq!(integer_pow(I64, 3, 0), 1);
        assert_eq!(integer_pow(I64, 0, 0), 1);
        assert_eq!(integer_pow(U64, u64::MAX, 3), u64::MAX);
        assert_eq!(integer_pow(I32, 2, 40), 0);
        assert_eq!(integer_pow(I32, 3, 1 << 40), integer_pow(I32, 3, 1 << 40), "large exponents terminate");
    }

    #[test]
    fn select_and_slice_clamping() {
        assert_eq!(select_case(Bool, 0, 2), 0);
        assert_eq!(select_case(Bool, 1, 2), 1);
        assert_eq!(select_case(I32, s(I32, -5), 3), 0);
        assert_eq!(select_case(I32, 1, 3), 1);
        assert_eq!(select_case(I32, 100, 3), 2);
        assert_eq!(select_case(I32, 5, 1), 0);
        assert_eq!(clamp_start(s(I32, -1), 4), 0);
        assert_eq!(clamp_start(7, 4), 3);
        assert_eq!(clamp_start(2, 4), 2);
        assert_eq!(clamp_start(0, 1), 0);
    }
}
