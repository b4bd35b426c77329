//! One loop per instruction: the op and the element types are chosen once,
//! outside the loop, so each loop body is a fixed expression the compiler
//! can vectorize (no per-element dispatch). An argument is an array of the
//! instruction's length or a scalar broadcast to it.

use super::elem::{convert, fmax, fmin, Elem, Float, Int, B8};
use super::ops::Op;
use crate::scalar::{self, Op as ScalarOp};

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

#[inline(always)]
pub fn map1<A: Copy, R>(out: &mut [R], a: Arg<A>, f: impl Fn(A) -> R) {
    match a {
        Arg::Arr(a) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x)),
        Arg::Splat(x) => out.iter_mut().for_each(|o| *o = f(x)),
    }
}

#[inline(always)]
pub fn map2<A: Copy, B: Copy, R>(out: &mut [R], a: Arg<A>, b: Arg<B>, f: impl Fn(A, B) -> R) {
    match (a, b) {
        (Arg::Arr(a), Arg::Arr(b)) => out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (&x, &y))| *o = f(x, y)),
        (Arg::Arr(a), Arg::Splat(y)) => out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, y)),
        (Arg::Splat(x), Arg::Arr(b)) => out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(x, y)),
        (Arg::Splat(x), Arg::Splat(y)) => out.iter_mut().for_each(|o| *o = f(x, y)),
    }
}

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
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(a.at(i), b.at(i), c.at(i));
    }
}

/// `op` of an integer or bool type `T` (every argument a `T`), by the
/// scalar programs' per-element functions.
pub fn int_op<T: Int>(op: Op, out: &mut [T], args: &[Arg<T>]) {
    #[inline(always)]
    fn bin<T: Int>(op: ScalarOp, x: T, y: T) -> T {
        T::from_word(scalar::binary(op, T::ST, x.to_word(), y.to_word()))
    }
    #[inline(always)]
    fn un<T: Int>(op: ScalarOp, x: T) -> T {
        T::from_word(scalar::unary(op, T::ST, x.to_word()))
    }
    let a = args[0];
    let b = || args[1];
    match op {
        Op::Add => map2(out, a, b(), |x, y| bin(ScalarOp::Add, x, y)),
        Op::Sub => map2(out, a, b(), |x, y| bin(ScalarOp::Sub, x, y)),
        Op::Mul => map2(out, a, b(), |x, y| bin(ScalarOp::Mul, x, y)),
        Op::Div => map2(out, a, b(), |x, y| bin(ScalarOp::Div, x, y)),
        Op::Rem => map2(out, a, b(), |x, y| bin(ScalarOp::Rem, x, y)),
        Op::Max => map2(out, a, b(), |x, y| bin(ScalarOp::Max, x, y)),
        Op::Min => map2(out, a, b(), |x, y| bin(ScalarOp::Min, x, y)),
        Op::And => map2(out, a, b(), |x, y| bin(ScalarOp::And, x, y)),
        Op::Or => map2(out, a, b(), |x, y| bin(ScalarOp::Or, x, y)),
        Op::Xor => map2(out, a, b(), |x, y| bin(ScalarOp::Xor, x, y)),
        Op::ShiftLeft => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftLeft, x, y)),
        Op::ShiftRightArithmetic => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftRightArithmetic, x, y)),
        Op::ShiftRightLogical => map2(out, a, b(), |x, y| bin(ScalarOp::ShiftRightLogical, x, y)),
        Op::Neg => map1(out, a, |x| un(ScalarOp::Neg, x)),
        Op::Abs => map1(out, a, |x| un(ScalarOp::Abs, x)),
        Op::Not => map1(out, a, |x| un(ScalarOp::Not, x)),
        _ => unreachable!("{op:?} is not an integer op (checked at decode)"),
    }
}

/// `op` of a float type `T` (every argument a `T`; `imm` an fma's
/// [`FmaForm`] code).
pub fn float_op<T: Float>(op: Op, imm: i64, out: &mut [T], args: &[Arg<T>]) {
    let a = args[0];
    let b = || args[1];
    match op {
        Op::Add => map2(out, a, b(), T::add),
        Op::Sub => map2(out, a, b(), T::sub),
        Op::Mul => map2(out, a, b(), T::mul),
        Op::Div => map2(out, a, b(), T::div),
        Op::Rem => map2(out, a, b(), T::rem),
        Op::Max => map2(out, a, b(), fmax),
        Op::Min => map2(out, a, b(), fmin),
        // Sign-bit operations in XLA too: no flush (measured).
        Op::Neg => map1(out, a, |x| -x),
        Op::Abs => map1(out, a, T::abs),
        Op::Fma => match FmaForm::from_code(imm) {
            Some(FmaForm::MulSub) => map3(out, a, b(), args[2], T::mul_sub),
            Some(FmaForm::NegMulAdd) => map3(out, a, b(), args[2], T::neg_mul_add),
            _ => map3(out, a, b(), args[2], T::mul_add),
        },
        _ => unreachable!("{op:?} is not a float op (checked at decode)"),
    }
}

/// What an fma computes (its immediate): XLA contracts `c - a*b` and
/// `a*b - c` into fused forms that return a NaN operand unnegated, which an
/// fma of a `neg` instruction's result would not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FmaForm {
    /// `a*b + c`
    MulAdd,
    /// `a*b - c`
    MulSub,
    /// `c - a*b`
    NegMulAdd,
}

impl FmaForm {
    pub fn from_code(code: i64) -> Option<FmaForm> {
        [FmaForm::MulAdd, FmaForm::MulSub, FmaForm::NegMulAdd].get(usize::try_from(code).ok()?).copied()
    }
}

/// A comparison of two `T`s.
pub fn compare<T: Elem>(op: Op, out: &mut [B8], a: Arg<T>, b: Arg<T>) {
    let f = |o: ScalarOp| move |x: T, y: T| B8(T::compare(o, x, y) as u8);
    match op {
        Op::Eq => map2(out, a, b, f(ScalarOp::Eq)),
        Op::Ne => map2(out, a, b, f(ScalarOp::Ne)),
        Op::Lt => map2(out, a, b, f(ScalarOp::Lt)),
        Op::Le => map2(out, a, b, f(ScalarOp::Le)),
        Op::Gt => map2(out, a, b, f(ScalarOp::Gt)),
        Op::Ge => map2(out, a, b, f(ScalarOp::Ge)),
        _ => unreachable!("{op:?} is not a comparison (checked at decode)"),
    }
}

/// `convert_element_type` from `A` to `B`.
pub fn convert_op<A: Elem, B: Elem>(out: &mut [B], a: Arg<A>) {
    map1(out, a, convert::<A, B>);
}

/// `select_n` with a bool predicate (1 or 2 cases).
pub fn select_bool<T: Copy>(out: &mut [T], pred: Arg<B8>, cases: &[Arg<T>]) {
    match cases {
        [only] => map1(out, *only, |x| x),
        [no, yes] => map3(out, pred, *no, *yes, |p, x, y| if p.0 != 0 { y } else { x }),
        _ => unreachable!("bool select_n of {} cases (checked at decode)", cases.len()),
    }
}

/// `select_n` with an int32 predicate, clamped to the cases as XLA does.
pub fn select_i32<T: Copy>(out: &mut [T], pred: Arg<i32>, cases: &[Arg<T>]) {
    let last = cases.len() as i32 - 1;
    map1(out, cases[0], |x| x);
    for (k, case) in cases.iter().enumerate().skip(1) {
        let k = k as i32;
        // Case k wins where the clamped index is k.
        for (i, o) in out.iter_mut().enumerate() {
            if pred.at(i).clamp(0, last) == k {
                *o = case.at(i);
            }
        }
    }
}
