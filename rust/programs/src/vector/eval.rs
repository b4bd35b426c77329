//! Evaluation, in chunks: every instruction's result is computed over one
//! chunk of elements into scratch (array inputs are read in place), the
//! chunk's outputs are copied out (a scalar output is broadcast), then the
//! next chunk. A chunk's values stay in cache, where one whole-array pass
//! per instruction would stream every value through memory.

use super::elem::{Elem, Float, B8};
use super::kernels::{compare, convert_op, float_op, int_op, select_bool, select_i32, Arg};
use super::ops::VectorOp;
use super::plan::{EvalPlan, Loc};
use super::program::{bad, VectorProgram, MAX_VALUES};
use super::scratch::VectorScratch;
use super::simplify::Rewrite;
use super::types::VectorType;
use super::view::{bytes_of, try_cast, words_as, words_as_mut, words_bytes_mut};
use crate::error::ProgramResult;

/// What an instruction reads: the inputs and the scratch before its result.
struct Ctx<'s, 'p> {
    program: &'p VectorProgram<'p>,
    inputs: &'s [&'s [u8]],
    before: &'s [u64],
    locs: &'s [Loc; MAX_VALUES],
    /// Whether to use the CPU's wider vector instructions where it has them.
    simd: bool,
    /// What becomes of a float op's second (constant) argument.
    adjust: Adjust,
    /// The chunk: its first element and its length (of array values).
    start: usize,
    len: usize,
}

/// A change to a float op's constant second argument (`simplify`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Adjust {
    None,
    Negate,
    Reciprocal,
    /// DAZ of a select's result (the value it chose).
    FlushResult,
}

impl<'s> Ctx<'s, '_> {
    fn ty(&self, v: i64) -> VectorType {
        self.program.layout.meta[v as usize].ty
    }

    #[inline(always)]
    fn arg<T: Elem>(&self, v: i64) -> Arg<'s, T> {
        let v = v as usize;
        let scalar = self.program.layout.meta[v].scalar;
        let elems: &'s [T] = match self.locs[v] {
            // Aligned (else it was copied to scratch) and n long: checked.
            Loc::Input(i) => {
                let all = try_cast(self.inputs[i]).unwrap_or(&[]);
                if scalar {
                    all
                } else {
                    &all[self.start..self.start + self.len]
                }
            }
            Loc::At(off) => words_as(&self.before[off..], if scalar { 1 } else { self.len }),
        };
        if scalar {
            Arg::Splat(elems[0])
        } else {
            Arg::Arr(elems)
        }
    }

    /// The arguments `vs` (at most `N`), all of type `T`. `N` is small for
    /// the common ops: the list is built and passed per instruction and
    /// chunk, and a list of `MAX_VALUES` cost more than a short loop.
    #[inline(always)]
    fn args_n<T: Elem, const N: usize>(&self, vs: &[i64]) -> ArgList<'s, T, N> {
        assert!(vs.len() <= N, "{} arguments, at most {N} here", vs.len());
        let mut list = ArgList { args: [Arg::Splat(T::default()); N], len: vs.len() };
        for (slot, &v) in list.args.iter_mut().zip(vs) {
            *slot = self.arg(v);
        }
        list
    }

    /// The arguments of an op other than `select_n` (at most 3).
    #[inline(always)]
    fn args<T: Elem>(&self, vs: &[i64]) -> ArgList<'s, T, 3> {
        self.args_n(vs)
    }
}

impl<'s> Ctx<'s, '_> {
    /// [`Ctx::args`] of a float op, with the constant second argument
    /// negated or inverted as XLA's rewrite does (`1/c` rounded once, as
    /// XLA folds it: `c` is a normal number, so no flush applies).
    fn float_args<T: Float>(&self, vs: &[i64]) -> ArgList<'s, T, 3> {
        let mut list = self.args::<T>(vs);
        if let (Adjust::Negate | Adjust::Reciprocal, Arg::Splat(c)) = (self.adjust, list.args[1]) {
            list.args[1] = Arg::Splat(if self.adjust == Adjust::Negate { -c } else { c.recip() });
        }
        list
    }
}

struct ArgList<'s, T, const N: usize> {
    args: [Arg<'s, T>; N],
    len: usize,
}

impl<'s, T, const N: usize> std::ops::Deref for ArgList<'s, T, N> {
    type Target = [Arg<'s, T>];
    fn deref(&self) -> &[Arg<'s, T>] {
        &self.args[..self.len]
    }
}

/// Runs `$body` with `$T` the Rust element type of `$ty`.
macro_rules! with_type {
    ($ty:expr, $T:ident => $body:expr) => {
        match $ty {
            VectorType::Bool => {
                type $T = B8;
                $body
            }
            VectorType::I8 => {
                type $T = i8;
                $body
            }
            VectorType::I16 => {
                type $T = i16;
                $body
            }
            VectorType::I32 => {
                type $T = i32;
                $body
            }
            VectorType::I64 => {
                type $T = i64;
                $body
            }
            VectorType::U8 => {
                type $T = u8;
                $body
            }
            VectorType::U16 => {
                type $T = u16;
                $body
            }
            VectorType::U32 => {
                type $T = u32;
                $body
            }
            VectorType::U64 => {
                type $T = u64;
                $body
            }
            VectorType::F32 => {
                type $T = f32;
                $body
            }
            VectorType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}

impl VectorProgram<'_> {
    /// Evaluates the program: `inputs[i]` holds input i's native-endian
    /// elements (n, or 1 for a scalar input), each `outputs[j]` receives
    /// output j's n elements. `scratch` is reused across calls.
    pub fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]], scratch: &mut VectorScratch) -> ProgramResult<()> {
        self.run_with(inputs, outputs, scratch, true)
    }

    /// [`VectorProgram::run`], with `simd` false: baseline instructions only (so
    /// tests compare the two builds of every loop).
    pub(super) fn run_with(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        scratch: &mut VectorScratch,
        simd: bool,
    ) -> ProgramResult<()> {
        self.run_chunked(inputs, outputs, scratch, simd, None)
    }

    /// [`VectorProgram::run`] in chunks of `chunk` elements (so benchmarks can
    /// compare chunk lengths, one chunk of n being the unchunked order).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn run_in_chunks(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        scratch: &mut VectorScratch,
        chunk: usize,
    ) -> ProgramResult<()> {
        self.run_chunked(inputs, outputs, scratch, true, Some(chunk))
    }

    /// Evaluates every instruction over elements `[c, c + chunk)` before
    /// the next chunk (every op is elementwise, so the results are those
    /// of whole-array evaluation), keeping a chunk's values in cache.
    /// `chunk`: elements per chunk, else the plan's choice.
    pub(super) fn run_chunked(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        scratch: &mut VectorScratch,
        simd: bool,
        chunk: Option<usize>,
    ) -> ProgramResult<()> {
        let l = &*self.layout;
        if inputs.len() != l.n_inputs || outputs.len() != l.n_outputs {
            return Err(bad(format!(
                "{} inputs and {} outputs given, the program has {} and {}",
                inputs.len(),
                outputs.len(),
                l.n_inputs,
                l.n_outputs
            )));
        }
        for (i, buf) in inputs.iter().enumerate() {
            let (ty, scalar) = self.input(i);
            let len = if scalar { 1 } else { l.n };
            if buf.len() != len * ty.size() {
                return Err(bad(format!("input {i} has {} bytes, expected {len} {}", buf.len(), ty.name())));
            }
        }
        for (j, buf) in outputs.iter().enumerate() {
            let ty = self.output_type(j);
            let one = self.output_is_scalar(j) && buf.len() == ty.size();
            if buf.len() != l.n * ty.size() && !one {
                return Err(bad(format!("output {j} has {} bytes, expected {} {}", buf.len(), l.n, ty.name())));
            }
        }
        let mut in_place = [false; MAX_VALUES];
        for (slot, (i, input)) in in_place.iter_mut().zip(inputs.iter().enumerate()) {
            *slot = aligned(input, self.input(i).0);
        }
        let EvalPlan { locs, chunk, words } = l.plan(&in_place[..l.n_inputs], chunk);
        scratch.ensure(words)?;
        let mut start = 0;
        while start < l.n {
            let len = chunk.min(l.n - start);
            self.run_chunk(inputs, &locs, &mut scratch.words, simd, start, len);
            for (j, out) in outputs.iter_mut().enumerate() {
                let v = self.output_value(j);
                let m = l.meta[v];
                let size = m.ty.size();
                let dst: &mut [u8] = if m.scalar && out.len() == size {
                    if start > 0 {
                        continue; // a one-element buffer is written once
                    }
                    out
                } else {
                    &mut out[start * size..(start + len) * size]
                };
                let src: &[u8] = match locs[v] {
                    Loc::Input(i) if m.scalar => inputs[i],
                    Loc::Input(i) => &inputs[i][start * size..(start + len) * size],
                    Loc::At(off) => &bytes_of(&scratch.words[off..])[..if m.scalar { size } else { len * size }],
                };
                if m.scalar {
                    dst.chunks_exact_mut(size).for_each(|o| o.copy_from_slice(src));
                } else {
                    dst.copy_from_slice(src);
                }
            }
            start += len;
        }
        scratch.trim();
        Ok(())
    }

    /// Every instruction over the `len` elements from `start`, into the
    /// scratch `words` at `locs`. Scalars and fills are the same in every
    /// chunk and own their slots, so only the first chunk computes them.
    fn run_chunk(
        &self,
        inputs: &[&[u8]],
        locs: &[Loc; MAX_VALUES],
        words: &mut [u64],
        simd: bool,
        start: usize,
        len: usize,
    ) {
        let l = &*self.layout;
        let first = start == 0;
        for (i, input) in inputs.iter().enumerate() {
            if let Loc::At(off) = locs[i] {
                let (ty, scalar) = self.input(i);
                let (from, bytes) = if scalar { (0, ty.size()) } else { (start * ty.size(), len * ty.size()) };
                if first || !scalar {
                    words_bytes_mut(&mut words[off..])[..bytes].copy_from_slice(&input[from..from + bytes]);
                }
            }
        }
        let w = self.words;
        let mut pos = l.instrs_at;
        for v in l.n_inputs..l.n_values {
            // Decoded already: every word below is known to be valid.
            let op = VectorOp::ALL[w[pos] as usize];
            let Ok(ty) = VectorType::from_code(w[pos + 1]) else { unreachable!("decoded type") };
            let n_args = w[pos + 2] as usize;
            let args = &w[pos + 3..pos + 3 + n_args];
            let imm = w[pos + 3 + n_args];
            pos += 4 + n_args;
            let scalar = l.meta[v].scalar;
            if !first && (scalar || matches!(l.rewrites[v], Rewrite::Fill(_))) {
                continue;
            }
            let vlen = if scalar { 1 } else { len };
            let swapped;
            let (op, args, adjust) = match l.rewrites[v] {
                Rewrite::None => (op, args, Adjust::None),
                Rewrite::Alias(_) => continue, // `locs` has its value's place
                Rewrite::Fill(bits) => {
                    let Loc::At(off) = locs[v] else { unreachable!("instructions live in scratch") };
                    // The first chunk is the longest: this covers every later one.
                    with_type!(ty, T => words_as_mut::<T>(&mut words[off..], vlen).fill(T::from_word(bits)));
                    continue;
                }
                Rewrite::Neg(a) => {
                    swapped = [a as i64, 0];
                    (VectorOp::Neg, &swapped[..1], Adjust::None)
                }
                Rewrite::Swap => {
                    swapped = [args[1], args[0]];
                    (op, &swapped[..], Adjust::None)
                }
                Rewrite::AddNegated => (VectorOp::Add, args, Adjust::Negate),
                Rewrite::MulReciprocal => (VectorOp::Mul, args, Adjust::Reciprocal),
                Rewrite::FlushedSelect => (op, args, Adjust::FlushResult),
            };
            let Loc::At(off) = locs[v] else { unreachable!("instructions live in scratch") };
            let (before, rest) = words.split_at_mut(off);
            let cx = Ctx { program: self, inputs, before, locs, simd, adjust, start, len };
            exec(op, ty, args, imm, rest, vlen, &cx);
        }
    }
}

/// DAZ of every element.
#[inline(always)]
fn flush<T: Float>(xs: &mut [T]) {
    for x in xs {
        *x = x.daz();
    }
}

/// Whether an operand's bytes can be read in place as elements of `ty`.
fn aligned(bytes: &[u8], ty: VectorType) -> bool {
    with_type!(ty, T => try_cast::<T>(bytes).is_some())
}

/// One instruction: its `len` result elements into `out`, with the widest
/// vector instructions the CPU has (the same results: every op is exact
/// IEEE or integer arithmetic, and `mul_add` is correctly rounded either
/// way -- in hardware instead of libm's software fma).
fn exec(op: VectorOp, ty: VectorType, args: &[i64], imm: i64, out: &mut [u64], len: usize, cx: &Ctx) {
    #[cfg(target_arch = "x86_64")]
    if cx.simd && std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just now).
        return unsafe { exec_avx2(op, ty, args, imm, out, len, cx) };
    }
    exec_baseline(op, ty, args, imm, out, len, cx)
}

/// [`exec_baseline`] compiled for AVX2 and FMA.
///
/// # Safety
/// Only call on a CPU with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exec_avx2(op: VectorOp, ty: VectorType, args: &[i64], imm: i64, out: &mut [u64], len: usize, cx: &Ctx) {
    exec_baseline(op, ty, args, imm, out, len, cx)
}

#[inline(always)]
fn exec_baseline(op: VectorOp, ty: VectorType, args: &[i64], imm: i64, out: &mut [u64], len: usize, cx: &Ctx) {
    match op {
        VectorOp::Const => with_type!(ty, T => words_as_mut::<T>(out, 1)[0] = T::from_word(imm as u64)),
        VectorOp::Iota => {
            let (stride, size) = super::program::iota_dims(imm);
            // In runs, not a division per element: a row index is runs of
            // `stride` equal values (a fill), a column index (stride 1)
            // runs counting 0..size.
            with_type!(ty, T => {
                let out = words_as_mut::<T>(out, len);
                let mut idx = cx.start as u64;
                let mut k = 0;
                while k < len {
                    let (value, within) = ((idx / stride) % size, idx % stride);
                    if stride == 1 {
                        let run = ((size - value) as usize).min(len - k);
                        for (j, o) in out[k..k + run].iter_mut().enumerate() {
                            *o = T::from_word(value + j as u64);
                        }
                        k += run;
                        idx += run as u64;
                    } else {
                        let run = ((stride - within) as usize).min(len - k);
                        out[k..k + run].fill(T::from_word(value));
                        k += run;
                        idx += run as u64;
                    }
                }
            })
        }
        VectorOp::Convert => {
            let a = args[0];
            with_type!(cx.ty(a), A => with_type!(ty, B => convert_op::<A, B>(words_as_mut(out, len), cx.arg(a))))
        }
        VectorOp::SelectN => {
            let p = args[0];
            let pred_is_bool = cx.ty(p) == VectorType::Bool;
            with_type!(ty, T => {
                let out = words_as_mut::<T>(out, len);
                if pred_is_bool {
                    select_bool(out, cx.arg(p), &cx.args_n::<T, 2>(&args[1..]))
                } else {
                    select_i32(out, cx.arg(p), &cx.args_n::<T, MAX_VALUES>(&args[1..]))
                }
            });
            if cx.adjust == Adjust::FlushResult {
                match ty {
                    VectorType::F32 => flush(words_as_mut::<f32>(out, len)),
                    VectorType::F64 => flush(words_as_mut::<f64>(out, len)),
                    _ => {}
                }
            }
        }
        _ if op.is_comparison() => {
            let (a, b) = (args[0], args[1]);
            with_type!(cx.ty(a), T => compare::<T>(op, words_as_mut(out, len), cx.arg(a), cx.arg(b)))
        }
        _ => match ty {
            VectorType::F32 => float_op::<f32>(op, imm, words_as_mut(out, len), &cx.float_args(args)),
            VectorType::F64 => float_op::<f64>(op, imm, words_as_mut(out, len), &cx.float_args(args)),
            VectorType::Bool => int_op::<B8>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::I8 => int_op::<i8>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::I16 => int_op::<i16>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::I32 => int_op::<i32>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::I64 => int_op::<i64>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::U8 => int_op::<u8>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::U16 => int_op::<u16>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::U32 => int_op::<u32>(op, words_as_mut(out, len), &cx.args(args)),
            VectorType::U64 => int_op::<u64>(op, words_as_mut(out, len), &cx.args(args)),
        },
    }
}
