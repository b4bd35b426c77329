//! One loop per instruction: the op and the element types are chosen once,
//! outside the loop, so each loop body is a fixed expression the compiler
//! can vectorize (no per-element dispatch). An argument is an array of the
//! instruction's length or a scalar broadcast to it.

// Indexed loops on purpose (see `map1`).
#![allow(clippy::needless_range_loop)]

use super::elem::{convert, fmax, fmin, Elem, Float, IntElem, B8};
use super::ops::VectorOp;
use crate::scalar::{self, ScalarOp};
use mosaic_rt_wire::wire_enum;

/// An instruction argument: every element, or one broadcast value.
#[derive(Clone, Copy)]
pub enum Arg<'a, T> {
    Arr(&'a [T]),
    Splat(T),
}

impl<T: Copy> Arg<'_, T> {
    #[inline(always)]
    fn at(&self, i: usize) -> T {
        match self {
            Arg::Arr(a) => a[i],
            Arg::Splat(x) => *x,
        }
    }
}

// The loops index pre-sliced arrays instead of using iterator adapters:
// `for_each`/`fold` are not always inlined, and a loop that is not inlined
// into `exec_avx2` is compiled for the baseline CPU only.

#[inline(always)]
pub fn map1<A: Copy, R>(out: &mut [R], a: Arg<A>, f: impl Fn(A) -> R) {
    let n = out.len();
    match a {
        Arg::Arr(a) => {
            let a = &a[..n];
            for i in 0..n {
                out[i] = f(a[i]);
            }
        }
        Arg::Splat(x) => {
            for o in out {
                *o = f(x);
            }
        }
    }
}

#[inline(always)]
pub fn map2<A: Copy, B: Copy, R>(out: &mut [R], a: Arg<A>, b: Arg<B>, f: impl Fn(A, B) -> R) {
    let n = out.len();
    match (a, b) {
        (Arg::Arr(a), Arg::Arr(b)) => {
            let (a, b) = (&a[..n], &b[..n]);
            for i in 0..n {
                out[i] = f(a[i], b[i]);
            }
        }
        (Arg::Arr(a), Arg::Splat(y)) => {
            let a = &a[..n];
            for i in 0..n {
                out[i] = f(a[i], y);
            }
        }
        (Arg::Splat(x), Arg::Arr(b)) => {
            let b = &b[..n];
            for i in 0..n {
                out[i] = f(x, b[i]);
            }
        }
        (Arg::Splat(x), Arg::Splat(y)) => {
            for o in out {
                *o = f(x, y);
            }
        }
    }
}

/// Callers pass closures, not fn items: a fn item is called through an
/// `Fn::call` shim that is not always inlined.
///
/// Three arguments: all arrays is the loop that matters (fma, select);
/// other mixes index through [`Arg::at`], which the compiler unswitches.
#[inline(always)]
pub fn map3<A: Copy, B: Copy, C: Copy, R>(out: &mut [R], a: Arg<A>, b: Arg<B>, c: Arg<C>, f: impl Fn(A, B, C) -> R) {
    if let (Arg::Arr(a), Arg::Arr(b), Arg::Arr(c)) = (a, b, c) {
        let n = out.len();
        let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
        for i in 0..n {
            out[i] = f(a[i], b[i], c[i]);
        }
        return;
    }
    for i in 0..out.len() {
        out[i] = f(a.at(i), b.at(i), c.at(i));
    }
}

/// `op` of an integer or bool type `T` (every argument a `T`), by the
/// scalar programs' per-element functions.
#[inline(always)]
pub fn int_op<T: IntElem>(op: VectorOp, out: &mut [T], args: &[Arg<T>]) {
    #[inline(always)]
    fn bin<T: IntElem>(op: ScalarOp, x: T, y: T) -> T {
        T::from_word(scalar::binary(op, T::ST, x.to_word(), y.to_word()))
    }
    #[inline(always)]
    fn un<T: IntElem>(op: ScalarOp, x: T) -> T {
        T::from_word(scalar::unary(op, T::ST, x.to_word()))
    }
    let a = args[0];
    let b = || args[1];
    match op {
        VectorOp::Add => map2(out, a, b(), |x, y| bin(ScalarOp::Add, x, y)),
        VectorOp::Sub => map2(out, a, b(), |x, y| bin(ScalarOp::Sub, x, y)),
        VectorOp::Mul => map2(out, a, b(), |x, y| bin(ScalarOp::Mul, x, y)),
        VectorOp::Div => map2(out, a, b(), |x, y| bin(ScalarOp::Div, x, y)),
        VectorOp::Rem => map2(out, a, b(), |x, y| bin(ScalarOp::Rem, x, y)),
        VectorOp::Max => map2(out, a, b(), |x, y| bin(ScalarOp::Max, x, y)),
        VectorOp::Min => map2(out, a, b(), |x, y| bin(ScalarOp::Min, x, y)),
        VectorOp::And => map2(out, a, b(), |x, y| bin(ScalarOp::And, x, y)),
        VectorOp::Or => map2(out, a, b(), |x, y| bin(ScalarOp::Or, x, y)),
        VectorOp::Xor => map2(out, a, b(), |x, y| bin(ScalarOp::Xor, x, y)),
        VectorOp::ShiftLeft => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftLeft, x, y)),
        VectorOp::ShiftRightArithmetic => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftRightArithmetic, x, y)),
        VectorOp::ShiftRightLogical => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftRightLogical, x, y)),
        VectorOp::Neg => map1(out, a, |x| un(ScalarOp::Neg, x)),
        VectorOp::Abs => map1(out, a, |x| un(ScalarOp::Abs, x)),
        VectorOp::Not => map1(out, a, |x| un(ScalarOp::Not, x)),
        _ => unreachable!("{op:?} is not an integer op (checked at decode)"),
    }
}

/// `op` of a float type `T` (every argument a `T`; `imm` an fma's
/// [`FmaForm`] code).
#[inline(always)]
pub fn float_op<T: Float>(op: VectorOp, imm: i64, out: &mut [T], args: &[Arg<T>]) {
    let a = args[0];
    let b = || args[1];
    match op {
        VectorOp::Add => map2(out, a, b(), |x, y| T::add(x, y)),
        VectorOp::Sub => map2(out, a, b(), |x, y| T::sub(x, y)),
        VectorOp::Mul => map2(out, a, b(), |x, y| T::mul(x, y)),
        VectorOp::Div => map2(out, a, b(), |x, y| T::div(x, y)),
        VectorOp::Rem => map2(out, a, b(), |x, y| T::rem(x, y)),
        VectorOp::Max => map2(out, a, b(), |x, y| fmax(x, y)),
        VectorOp::Min => map2(out, a, b(), |x, y| fmin(x, y)),
        // Sign-bit operations in XLA too: no flush (measured).
        VectorOp::Neg => map1(out, a, |x| -x),
        VectorOp::Abs => map1(out, a, |x| T::abs(x)),
        VectorOp::Fma => match FmaForm::from_code(imm) {
            Ok(FmaForm::MulSub) => fused::<T, MulSub>(out, a, b(), args[2]),
            Ok(FmaForm::NegMulAdd) => fused::<T, NegMulAdd>(out, a, b(), args[2]),
            _ => fused::<T, MulAdd>(out, a, b(), args[2]),
        },
        _ => unreachable!("{op:?} is not a float op (checked at decode)"),
    }
}

/// One fused form as a type: its `apply` is always inlined into the loop
/// (a closure this size is not, and then runs without the loop's FMA
/// instructions: a libm call per element, many times slower; see
/// benches/PERFORMANCE.md, "Vector programs: where native stops").
trait Fused<T> {
    fn apply(a: T, b: T, c: T) -> T;
}

struct MulAdd;
struct MulSub;
struct NegMulAdd;

impl<T: Float> Fused<T> for MulAdd {
    #[inline(always)]
    fn apply(a: T, b: T, c: T) -> T {
        a.mul_add(b, c)
    }
}

impl<T: Float> Fused<T> for MulSub {
    #[inline(always)]
    fn apply(a: T, b: T, c: T) -> T {
        a.mul_sub(b, c)
    }
}

impl<T: Float> Fused<T> for NegMulAdd {
    #[inline(always)]
    fn apply(a: T, b: T, c: T) -> T {
        a.neg_mul_add(b, c)
    }
}

/// An fma loop of form `F`.
#[inline(always)]
fn fused<T: Float, F: Fused<T>>(out: &mut [T], a: Arg<T>, b: Arg<T>, c: Arg<T>) {
    let n = out.len();
    if let (Arg::Arr(a), Arg::Arr(b), Arg::Arr(c)) = (a, b, c) {
        let (a, b, c) = (&a[..n], &b[..n], &c[..n]);
        for i in 0..n {
            out[i] = F::apply(a[i], b[i], c[i]);
        }
        return;
    }
    for i in 0..n {
        out[i] = F::apply(a.at(i), b.at(i), c.at(i));
    }
}

wire_enum! {
    /// What an fma computes (its immediate): XLA contracts `c - a*b` and
    /// `a*b - c` into fused forms that return a NaN operand unnegated, which
    /// an fma of a `neg` instruction's result would not.
    pub enum FmaForm as listed "fma form" {
        /// `a*b + c`
        MulAdd = 0 => "mul_add",
        /// `a*b - c`
        MulSub = 1 => "mul_sub",
        /// `c - a*b`
        NegMulAdd = 2 => "neg_mul_add",
    }
}

/// A comparison of two `T`s.
#[inline(always)]
pub fn compare<T: Elem>(op: VectorOp, out: &mut [B8], a: Arg<T>, b: Arg<T>) {
    let f = |o: ScalarOp| move |x: T, y: T| B8(T::compare(o, x, y) as u8);
    match op {
        VectorOp::Eq => map2(out, a, b, f(ScalarOp::Eq)),
        VectorOp::Ne => map2(out, a, b, f(ScalarOp::Ne)),
        VectorOp::Lt => map2(out, a, b, f(ScalarOp::Lt)),
        VectorOp::Le => map2(out, a, b, f(ScalarOp::Le)),
        VectorOp::Gt => map2(out, a, b, f(ScalarOp::Gt)),
        VectorOp::Ge => map2(out, a, b, f(ScalarOp::Ge)),
        _ => unreachable!("{op:?} is not a comparison (checked at decode)"),
    }
}

/// `convert_element_type` from `A` to `B`.
#[inline(always)]
pub fn convert_op<A: Elem, B: Elem>(out: &mut [B], a: Arg<A>) {
    map1(out, a, |x| convert::<A, B>(x));
}

/// `select_n` with a bool predicate (1 or 2 cases).
#[inline(always)]
pub fn select_bool<T: Copy>(out: &mut [T], pred: Arg<B8>, cases: &[Arg<T>]) {
    match cases {
        [only] => map1(out, *only, |x| x),
        [no, yes] => map3(out, pred, *no, *yes, |p, x, y| if p.0 != 0 { y } else { x }),
        _ => unreachable!("bool select_n of {} cases (checked at decode)", cases.len()),
    }
}

/// `select_n` with an int32 predicate, clamped to the cases as XLA does.
#[inline(always)]
pub fn select_i32<T: Copy>(out: &mut [T], pred: Arg<i32>, cases: &[Arg<T>]) {
    let last = cases.len() as i32 - 1;
    map1(out, cases[0], |x| x);
    for (k, case) in cases.iter().enumerate().skip(1) {
        let k = k as i32;
        // Case k wins where the clamped index is k.
        for i in 0..out.len() {
            if pred.at(i).clamp(0, last) == k {
                out[i] = case.at(i);
            }
        }
    }
}
