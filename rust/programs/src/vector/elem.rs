//! Element types as Rust types, and XLA:CPU's per-element semantics.
//!
//! Integers and bools delegate to the scalar programs' ops (`IntElem`), so the
//! two evaluators cannot disagree. Floats (`Float`) follow XLA:CPU, which
//! runs with denormals-are-zero and flush-to-zero set: every arithmetic op,
//! compare and convert treats a subnormal input as a zero of its sign and
//! flushes a subnormal result. That is done here with bit operations, so the
//! result does not depend on the calling thread's MXCSR.

use super::types::VectorType;
use crate::scalar::{self, ScalarOp, ScalarType};

/// A bool element as XLA stores it (one byte; any non-zero byte is true).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct B8(pub u8);

/// A plain number type that may be viewed from raw bytes.
///
/// # Safety
/// Implementors have no padding, alignment at most 8, and every bit
/// pattern of their size is a valid value.
pub unsafe trait Pod: Copy + Default + 'static {}

// SAFETY: primitive numbers (and a transparent u8) without padding, of
// alignment <= 8, valid for every bit pattern.
unsafe impl Pod for B8 {}
// SAFETY: as above.
unsafe impl Pod for i8 {}
// SAFETY: as above.
unsafe impl Pod for i16 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for i64 {}
// SAFETY: as above.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: as above.
unsafe impl Pod for f32 {}
// SAFETY: as above.
unsafe impl Pod for f64 {}

/// An element type of vector programs and its conversions.
pub trait Elem: Pod {
    const TY: VectorType;
    /// An integer/bool element in the scalar programs' canonical form;
    /// a float's bits (scalar values are kept as `u64`s this way too).
    fn to_word(self) -> u64;
    /// The inverse of [`Elem::to_word`] for canonical words.
    fn from_word(w: u64) -> Self;
    /// A float's value after [`Float::daz`] (exact in f64).
    fn to_f64(self) -> f64;
    /// `x` converted as XLA converts a float: integers saturate (NaN is 0),
    /// floats round to nearest (then [`Float::ftz`]).
    fn from_float(x: f64) -> Self;
    /// An integer (`w` canonical, of signedness `signed`) converted: floats
    /// round to nearest once.
    fn from_int(w: u64, signed: bool) -> Self;
    /// `a op b` for a comparison `op` (floats: IEEE after DAZ, so NaN is
    /// unordered and only `ne` holds).
    fn compare(op: ScalarOp, a: Self, b: Self) -> bool;
}

macro_rules! int_elem {
    ($t:ty, $ty:ident) => {
        impl Elem for $t {
            const TY: VectorType = VectorType::$ty;
            #[inline(always)]
            fn to_word(self) -> u64 {
                // Sign- or zero-extends as the type is signed or not.
                self as i128 as u64
            }
            #[inline(always)]
            fn from_word(w: u64) -> Self {
                w as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_float(x: f64) -> Self {
                // Rust's float->int `as` saturates and maps NaN to 0, as XLA.
                x as $t
            }
            #[inline(always)]
            fn from_int(w: u64, _signed: bool) -> Self {
                scalar::convert(<$t as IntElem>::ST, w) as $t
            }
            #[inline(always)]
            fn compare(op: ScalarOp, a: Self, b: Self) -> bool {
                scalar::binary(op, <$t as IntElem>::ST, a.to_word(), b.to_word()) != 0
            }
        }
        impl IntElem for $t {
            const ST: ScalarType = ScalarType::$ty;
        }
    };
}

int_elem!(i8, I8);
int_elem!(i16, I16);
int_elem!(i32, I32);
int_elem!(i64, I64);
int_elem!(u8, U8);
int_elem!(u16, U16);
int_elem!(u32, U32);
int_elem!(u64, U64);

impl Elem for B8 {
    const TY: VectorType = VectorType::Bool;
    #[inline(always)]
    fn to_word(self) -> u64 {
        (self.0 != 0) as u64
    }
    #[inline(always)]
    fn from_word(w: u64) -> Self {
        B8(w as u8)
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.to_word() as f64
    }
    #[inline(always)]
    fn from_float(x: f64) -> Self {
        B8((x != 0.0) as u8)
    }
    #[inline(always)]
    fn from_int(w: u64, _signed: bool) -> Self {
        B8((w != 0) as u8)
    }
    #[inline(always)]
    fn compare(op: ScalarOp, a: Self, b: Self) -> bool {
        scalar::binary(op, ScalarType::Bool, a.to_word(), b.to_word()) != 0
    }
}

impl IntElem for B8 {
    const ST: ScalarType = ScalarType::Bool;
}

/// An integer or bool element: its ops are the scalar programs'.
pub trait IntElem: Elem {
    const ST: ScalarType;
}

/// A float element with XLA:CPU's denormal handling.
pub trait Float: Elem + std::ops::Neg<Output = Self> + PartialOrd {
    /// `x` with a subnormal flushed to a zero of its sign (inputs: DAZ).
    fn daz(self) -> Self;
    /// The same flush applied to a result (FTZ).
    #[inline(always)]
    fn ftz(self) -> Self {
        self.daz()
    }
    fn is_nan(self) -> bool;
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    fn div(self, b: Self) -> Self;
    fn rem(self, b: Self) -> Self;
    /// `a*b + c`, `a*b - c`, `c - a*b` rounded once; a NaN operand is
    /// returned unnegated (as x86's fused forms do).
    fn mul_add(self, b: Self, c: Self) -> Self;
    fn mul_sub(self, b: Self, c: Self) -> Self;
    fn neg_mul_add(self, b: Self, c: Self) -> Self;
    fn abs(self) -> Self;
    /// `self` with its quiet bit set.
    fn quiet(self) -> Self;
    /// `1 / self`, IEEE (no flush).
    fn recip(self) -> Self;
    /// `self` with the sign bit the and / or of both signs.
    fn sign_and(self, b: Self) -> Self;
    fn sign_or(self, b: Self) -> Self;
}

/// [`nan_of2`] of three operands, each chosen explicitly: `mul_add` may be
/// a software fma without x86's operand order.
#[inline(always)]
fn nan_of3<T: Float>(r: T, a: T, b: T, c: T) -> T {
    if a.is_nan() {
        a.quiet()
    } else if b.is_nan() {
        b.quiet()
    } else if c.is_nan() {
        c.quiet()
    } else {
        r
    }
}

/// The NaN XLA:CPU returns for `a op b` whose result `r` is NaN: the
/// first NaN operand, quieted (x86 keeps the first source's payload), else
/// the operation's own default NaN. The hardware already returns a lone
/// NaN operand quieted, so only a NaN `a` needs choosing (branch-free: the
/// loops stay vectorized).
#[inline(always)]
fn nan_of2<T: Float>(r: T, a: T, _b: T) -> T {
    if a.is_nan() {
        a.quiet()
    } else {
        r
    }
}

macro_rules! float_elem {
    ($t:ty, $ty:ident, $bits:ty) => {
        impl Elem for $t {
            const TY: VectorType = VectorType::$ty;
            #[inline(always)]
            fn to_word(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn from_word(w: u64) -> Self {
                <$t>::from_bits(w as $bits)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.daz() as f64
            }
            #[inline(always)]
            fn from_float(x: f64) -> Self {
                (x as $t).ftz()
            }
            #[inline(always)]
            fn from_int(w: u64, signed: bool) -> Self {
                // One rounding from the exact integer (an f64 detour would
                // round twice for float32).
                if signed {
                    w as i64 as $t
                } else {
                    w as $t
                }
            }
            #[inline(always)]
            fn compare(op: ScalarOp, a: Self, b: Self) -> bool {
                let (a, b) = (a.daz(), b.daz());
                match op {
                    ScalarOp::Eq => a == b,
                    ScalarOp::Ne => a != b,
                    ScalarOp::Lt => a < b,
                    ScalarOp::Le => a <= b,
                    ScalarOp::Gt => a > b,
                    _ => a >= b,
                }
            }
        }

        impl Float for $t {
            #[inline(always)]
            fn daz(self) -> Self {
                const EXPONENT: $bits = <$t>::INFINITY.to_bits();
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                let b = self.to_bits();
                <$t>::from_bits(if b & EXPONENT == 0 { b & SIGN } else { b })
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn add(self, b: Self) -> Self {
                nan_of2((self.daz() + b.daz()).ftz(), self, b)
            }
            #[inline(always)]
            fn sub(self, b: Self) -> Self {
                nan_of2((self.daz() - b.daz()).ftz(), self, b)
            }
            #[inline(always)]
            fn mul(self, b: Self) -> Self {
                nan_of2((self.daz() * b.daz()).ftz(), self, b)
            }
            #[inline(always)]
            fn div(self, b: Self) -> Self {
                nan_of2((self.daz() / b.daz()).ftz(), self, b)
            }
            #[inline(always)]
            fn rem(self, b: Self) -> Self {
                // XLA calls fmod: no DAZ of the dividend, no FTZ of the (exact)
                // result; the divisor is flushed (x % subnormal is NaN, measured).
                nan_of2(self % b.daz(), self, b)
            }
            #[inline(always)]
            fn mul_add(self, b: Self, c: Self) -> Self {
                nan_of3(self.daz().mul_add(b.daz(), c.daz()).ftz(), self, b, c)
            }
            #[inline(always)]
            fn mul_sub(self, b: Self, c: Self) -> Self {
                nan_of3(self.daz().mul_add(b.daz(), -c.daz()).ftz(), self, b, c)
            }
            #[inline(always)]
            fn neg_mul_add(self, b: Self, c: Self) -> Self {
                nan_of3((-self.daz()).mul_add(b.daz(), c.daz()).ftz(), self, b, c)
            }
            #[inline(always)]
            fn recip(self) -> Self {
                1.0 / self
            }
            #[inline(always)]
            fn quiet(self) -> Self {
                const QUIET: $bits = 1 << (<$t>::MANTISSA_DIGITS - 2);
                <$t>::from_bits(self.to_bits() | QUIET)
            }
            #[inline(always)]
            fn sign_and(self, b: Self) -> Self {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                <$t>::from_bits(self.to_bits() & (b.to_bits() | !SIGN))
            }
            #[inline(always)]
            fn sign_or(self, b: Self) -> Self {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                <$t>::from_bits(self.to_bits() | (b.to_bits() & SIGN))
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
    };
}

float_elem!(f32, F32, u32);
float_elem!(f64, F64, u64);

/// XLA:CPU's float max (measured, both jax versions): `a` if it is NaN
/// (unchanged, even signaling); else `a` if `a > b`; else `b` with the
/// sign bit the and of both signs -- so `max(+0, -0) = +0` either way
/// round, and a NaN `b` loses its sign when `a` is not negative. Inputs DAZ.
#[inline(always)]
pub fn fmax<T: Float>(a: T, b: T) -> T {
    let (a, b) = (a.daz(), b.daz());
    if a.is_nan() || a > b {
        a
    } else {
        b.sign_and(a)
    }
}

/// XLA:CPU's float min: as [`fmax`] with `a < b`, and the or of the signs
/// (`min(+0, -0) = -0`; a NaN `b` turns negative when `a` is).
#[inline(always)]
pub fn fmin<T: Float>(a: T, b: T) -> T {
    let (a, b) = (a.daz(), b.daz());
    if a.is_nan() || a < b {
        a
    } else {
        b.sign_or(a)
    }
}

/// `x` of type `A` converted to `B` as XLA's `convert_element_type`.
#[inline(always)]
pub fn convert<A: Elem, B: Elem>(x: A) -> B {
    if A::TY.is_float() {
        if B::TY.is_float() && A::TY == B::TY {
            return B::from_word(x.to_word()); // XLA drops a no-op convert
        }
        B::from_float(x.to_f64())
    } else {
        B::from_int(x.to_word(), A::TY.is_signed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB32: f32 = 1e-39;

    #[test]
    fn daz_and_ftz_keep_the_sign() {
        assert_eq!(SUB32.daz().to_bits(), 0);
        assert_eq!((-SUB32).daz().to_bits(), 0x8000_0000);
        assert_eq!(1.0f32.daz(), 1.0);
        assert!(f32::NAN.daz().is_nan());
        assert_eq!(f32::INFINITY.daz(), f32::INFINITY);
        assert_eq!(f32::MIN_POSITIVE.daz(), f32::MIN_POSITIVE);
        assert_eq!(1e-310f64.daz().to_bits(), 0);
        // XLA: 1e-39 * 1e10 -> 0 (DAZ), 1.5e-38 * 0.5 -> 0 (FTZ).
        assert_eq!(SUB32.mul(1e10), 0.0);
        assert_eq!(1.5e-38f32.mul(0.5).to_bits(), 0);
        assert_eq!((-1.5e-38f32).mul(0.5).to_bits(), 0x8000_0000);
        assert_eq!(1.0f32.div(SUB32), f32::INFINITY);
    }

    #[test]
    fn max_min_of_nans_and_zeros() {
        assert_eq!(fmax(0.0f32, -0.0).to_bits(), 0);
        assert_eq!(fmax(-0.0f32, 0.0).to_bits(), 0);
        assert_eq!(fmin(0.0f32, -0.0).to_bits(), 0x8000_0000);
        assert_eq!(fmin(-0.0f32, 0.0).to_bits(), 0x8000_0000);
        let payload = f32::from_bits(0x7fc1_2345);
        assert_eq!(fmax(payload, 1.0).to_bits(), 0x7fc1_2345);
        assert_eq!(fmax(1.0, payload).to_bits(), 0x7fc1_2345);
        let negative = f32::from_bits(0xffc0_0001);
        assert_eq!(fmax(6.0, negative).to_bits(), 0x7fc0_0001, "XLA clears the sign");
        assert_eq!(fmax(-6.0, negative).to_bits(), 0xffc0_0001);
        assert_eq!(fmin(-6.0, payload).to_bits(), 0xffc1_2345, "XLA sets the sign");
        let signaling = f32::from_bits(0x7f80_0003);
        assert_eq!(fmax(signaling, negative).to_bits(), 0x7f80_0003, "not quieted");
        assert_eq!(fmin(f64::NAN, 1.0).to_bits(), f64::NAN.to_bits());
        assert_eq!(fmax(SUB32, -1.0).to_bits(), 0, "a subnormal max is flushed");
        assert_eq!(fmin(-SUB32, 1.0).to_bits(), 0x8000_0000);
        assert_eq!(fmax(2.0f64, 3.0), 3.0);
    }

    #[test]
    fn conversions_saturate_round_and_flush() {
        assert_eq!(convert::<f32, i32>(1e10), i32::MAX);
        assert_eq!(convert::<f32, i32>(-1e10), i32::MIN);
        assert_eq!(convert::<f32, i32>(f32::NAN), 0);
        assert_eq!(convert::<f32, i32>(2.5), 2);
        assert_eq!(convert::<f32, i32>(-2.5), -2);
        assert_eq!(convert::<f32, B8>(SUB32), B8(0), "DAZ: a subnormal is false");
        assert_eq!(convert::<f32, B8>(f32::NAN), B8(1));
        assert_eq!(convert::<f64, f32>(1e-39).to_bits(), 0, "FTZ of the narrowed result");
        assert_eq!(convert::<f32, f64>(-SUB32).to_bits(), 1 << 63, "DAZ of the input");
        assert_eq!(convert::<f64, f32>(1e300), f32::INFINITY);
        assert_eq!(convert::<u64, f32>(u64::MAX), 18446744073709551616.0);
        assert_eq!(convert::<i64, f32>(-(1 << 40) - 1), -1099511627776.0, "rounds once");
        assert_eq!(convert::<u32, f64>(u32::MAX), 4294967295.0);
        assert_eq!(convert::<i32, i8>(300), 44);
        assert_eq!(convert::<i8, u32>(-1), u32::MAX);
        assert_eq!(convert::<i32, B8>(-5), B8(1));
        assert_eq!(convert::<B8, f32>(B8(1)), 1.0);
        assert_eq!(convert::<B8, i64>(B8(1)), 1);
        let nan = f32::from_bits(0x7fc1_2345);
        assert_eq!(convert::<f32, f32>(nan).to_bits(), 0x7fc1_2345);
    }

    #[test]
    fn fma_rounds_once() {
        let (a, b, c) = (1.0f32 + f32::EPSILON, 1.0f32 - f32::EPSILON, -1.0f32);
        assert_eq!(a.mul_add(b, c), -f32::EPSILON * f32::EPSILON);
        assert_ne!(a.mul(b).add(c), a.mul_add(b, c));
        assert_eq!(Float::mul_add(1e-20f32, 1e-20, 0.0).to_bits(), 0, "FTZ of a subnormal fma");
        assert_eq!(Float::mul_add(1e-39f32, 1e10, 0.0).to_bits(), 0, "DAZ of fma inputs");
    }

    #[test]
    fn words_round_trip() {
        assert_eq!((-3i8).to_word(), (-3i64) as u64);
        assert_eq!(200u8.to_word(), 200);
        assert_eq!(i8::from_word((-3i64) as u64), -3);
        assert_eq!(B8(7).to_word(), 1);
        assert_eq!(f32::from_word(0x3f80_0000), 1.0);
        assert_eq!((-0.0f64).to_word(), 1 << 63);
    }
}
