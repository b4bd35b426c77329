//! A vector program: its wire format and validation.
//!
//! Wire format (one int64 array):
//!
//! ```text
//! FORMAT, n, n_inputs, n_instrs, n_outputs,
//! per input:  type, kind          (0: an array of n elements; 1: a scalar)
//! per instr:  op, type, n_args, args[n_args], imm
//! per output: value
//! ```
//!
//! Values are numbered inputs first, then one per instruction; arguments
//! name earlier values. `type` is the result's [`VectorType`] code, `imm`
//! a constant's bits (integers canonical as in scalar programs, floats
//! their IEEE bit pattern), an fma's form (0: `a*b+c`, 1: `a*b-c`, 2:
//! `c-a*b`: XLA's contractions, see `kernels::FmaForm`), an iota's
//! `stride | size << 32` (see [`iota_dims`]), else 0. An
//! instruction whose arguments are all
//! scalars is a scalar. Every output is written as n elements, but a
//! scalar one into a one-element buffer is written once. Everything
//! is checked once by [`VectorProgram::decode`]; evaluation then cannot fail.

use super::kernels::FmaForm;
use super::meta::VectorValueMeta;
use super::ops::VectorOp;
use super::scratch::VectorScratch;
use super::simplify::{self, Rewrite};
use super::types::VectorType;
use crate::error::{ProgramError, ProgramResult};
use crate::program_words::{self, LayoutRef, ProgramKind, Reader};
use crate::scalar;

/// The format version, first word of every program.
pub const FORMAT: i64 = 1;
/// Most values (inputs plus instructions) in one program: scratch for one
/// evaluation is at most this many values of n elements.
pub const MAX_VALUES: usize = 64;
/// Most elements per value (scratch is allocated up front).
pub const MAX_ELEMENTS: usize = u32::MAX as usize;

const NO_META: VectorValueMeta =
    VectorValueMeta { ty: VectorType::Bool, scalar: true, const_at: None, convert_of: None, compare_of: None };

/// What decoding learnt of a program's words (reusable for equal words).
#[derive(Clone, Copy)]
pub struct VectorLayout {
    pub(super) n: usize,
    pub(super) n_inputs: usize,
    pub(super) n_values: usize,
    pub(super) instrs_at: usize,
    pub(super) outputs_at: usize,
    pub(super) n_outputs: usize,
    pub(super) meta: [VectorValueMeta; MAX_VALUES],
    /// Per value: how XLA would rewrite the instruction (`simplify`).
    pub(super) rewrites: [Rewrite; MAX_VALUES],
}

/// A validated program over its words.
pub struct VectorProgram<'a> {
    pub(super) words: &'a [i64],
    pub(super) layout: LayoutRef<'a, VectorLayout>,
}

/// A program's layout: decoded just now, or a cache's.
#[cold]
pub(super) fn bad(message: String) -> ProgramError {
    ProgramError::value(format!("vector program: {message}"))
}

impl<'a> VectorProgram<'a> {
    /// Parses and type-checks `words`.
    pub fn decode(words: &'a [i64]) -> ProgramResult<VectorProgram<'a>> {
        let layout = decode_layout(words)?;
        Ok(VectorProgram { words, layout: LayoutRef::Owned(Box::new(layout)) })
    }

    /// Elements of every array input and of every output.
    pub fn len(&self) -> usize {
        self.layout.n
    }

    pub fn is_empty(&self) -> bool {
        self.layout.n == 0
    }

    pub fn num_inputs(&self) -> usize {
        self.layout.n_inputs
    }

    pub fn num_outputs(&self) -> usize {
        self.layout.n_outputs
    }

    /// Type of input `i < num_inputs()`, and whether it is a scalar.
    pub fn input(&self, i: usize) -> (VectorType, bool) {
        let m = self.layout.meta[i];
        (m.ty, m.scalar)
    }

    /// Type of output `j < num_outputs()`.
    pub fn output_type(&self, j: usize) -> VectorType {
        self.layout.meta[self.output_value(j)].ty
    }

    /// Whether output `j` is a scalar of the program: written as one
    /// element into a one-element buffer, else broadcast to n.
    pub fn output_is_scalar(&self, j: usize) -> bool {
        self.layout.meta[self.output_value(j)].scalar
    }

    pub(super) fn output_value(&self, j: usize) -> usize {
        self.words[self.layout.outputs_at + j] as usize
    }
}

fn decode_layout(words: &[i64]) -> ProgramResult<VectorLayout> {
    let mut r = Reader { words, pos: 0, bad };
    let format = r.next("format")?;
    if format != FORMAT {
        return Err(bad(format!("format {format}, expected {FORMAT} (a mosaic_rt build mismatch)")));
    }
    let n = r.count("element count", MAX_ELEMENTS)?;
    let n_inputs = r.count("input count", MAX_VALUES)?;
    let n_instrs = r.count("instruction count", MAX_VALUES)?;
    let n_outputs = r.count("output count", MAX_VALUES)?;
    if n_inputs + n_instrs > MAX_VALUES {
        return Err(bad(format!("{} values, at most {MAX_VALUES}", n_inputs + n_instrs)));
    }
    let mut meta = [NO_META; MAX_VALUES];
    for m in meta.iter_mut().take(n_inputs) {
        let ty = VectorType::from_code(r.next("input type")?).map_err(|e| bad(e.message))?;
        let scalar = match r.next("input kind")? {
            0 => false,
            1 => true,
            k => return Err(bad(format!("input kind {k} (0: an array, 1: a scalar)"))),
        };
        *m = VectorValueMeta { ty, scalar, ..NO_META };
    }
    let instrs_at = r.pos;
    let mut rewrites = [Rewrite::None; MAX_VALUES];
    for k in 0..n_instrs {
        let v = n_inputs + k;
        let at = r.pos;
        meta[v] = check_instr(&mut r, &meta[..v])?;
        // Checked: op, type, argument count and arguments are valid.
        let (op, ty, n_args) = (VectorOp::ALL[words[at] as usize], meta[v].ty, words[at + 2] as usize);
        rewrites[v] = simplify::rewrite(op, ty, &words[at + 3..at + 3 + n_args], &meta[..v], words);
    }
    let outputs_at = r.pos;
    let n_values = n_inputs + n_instrs;
    for _ in 0..n_outputs {
        value(&meta[..n_values], r.next("output")?)?;
    }
    if r.pos != words.len() {
        return Err(bad(format!("{} words after the outputs", words.len() - r.pos)));
    }
    Ok(VectorLayout { n, n_inputs, n_values, instrs_at, outputs_at, n_outputs, meta, rewrites })
}

/// The meta of earlier value `v`.
fn value(meta: &[VectorValueMeta], v: i64) -> ProgramResult<VectorValueMeta> {
    usize::try_from(v)
        .ok()
        .and_then(|i| meta.get(i))
        .copied()
        .ok_or_else(|| bad(format!("value {v} used before it is defined")))
}

/// Checks one instruction at the reader and returns its result's meta.
fn check_instr(r: &mut Reader, meta: &[VectorValueMeta]) -> ProgramResult<VectorValueMeta> {
    let code = r.next("op")?;
    let op = VectorOp::from_code(code).map_err(|e| bad(e.message))?;
    let ty = VectorType::from_code(r.next("result type")?).map_err(|e| bad(e.message))?;
    let n = r.count("argument count", MAX_VALUES)?;
    let mut args = [NO_META; MAX_VALUES];
    let mut first_args = [0u8; 2];
    for (k, a) in args.iter_mut().take(n).enumerate() {
        let v = r.next("argument")?;
        *a = value(meta, v)?;
        if k < 2 {
            first_args[k] = v as u8; // < MAX_VALUES: checked by `value`
        }
    }
    let args = &args[..n];
    let imm_at = r.pos as u32;
    let imm = r.next("immediate")?;
    let name = op.name();
    let arity = |want: usize| -> ProgramResult<()> {
        if n != want {
            return Err(bad(format!("{name} takes {want} argument(s), got {n}")));
        }
        Ok(())
    };
    let kinds = |ok: bool, what: &str| -> ProgramResult<()> {
        if !ok {
            return Err(bad(format!("{name} of {} (needs {what})", ty.name())));
        }
        Ok(())
    };
    // Every argument from `from` on has type `t`.
    let all_of = |t: VectorType, from: usize| -> ProgramResult<()> {
        for a in &args[from..] {
            if a.ty != t {
                return Err(bad(format!("{name} of {} given a {} argument", t.name(), a.ty.name())));
            }
        }
        Ok(())
    };
    match op {
        VectorOp::Const => {
            arity(0)?;
            check_const(ty, imm)?;
        }
        VectorOp::Add | VectorOp::Sub | VectorOp::Mul | VectorOp::Div | VectorOp::Rem => {
            arity(2)?;
            kinds(ty != VectorType::Bool, "a number type")?;
            all_of(ty, 0)?;
        }
        VectorOp::Max | VectorOp::Min => {
            arity(2)?;
            all_of(ty, 0)?;
        }
        VectorOp::And | VectorOp::Or | VectorOp::Xor => {
            arity(2)?;
            kinds(!ty.is_float(), "an integer or bool type")?;
            all_of(ty, 0)?;
        }
        VectorOp::Not => {
            arity(1)?;
            kinds(!ty.is_float(), "an integer or bool type")?;
            all_of(ty, 0)?;
        }
        VectorOp::Neg | VectorOp::Abs => {
            arity(1)?;
            kinds(ty != VectorType::Bool, "a number type")?;
            all_of(ty, 0)?;
        }
        VectorOp::ShiftLeft | VectorOp::ShiftRightArithmetic | VectorOp::ShiftRightLogical => {
            arity(2)?;
            kinds(ty.is_int(), "an integer type")?;
            all_of(ty, 0)?;
        }
        VectorOp::Eq | VectorOp::Ne | VectorOp::Lt | VectorOp::Le | VectorOp::Gt | VectorOp::Ge => {
            arity(2)?;
            if ty != VectorType::Bool {
                return Err(bad(format!("{name} returns bool, not {}", ty.name())));
            }
            all_of(args[0].ty, 1)?;
        }
        VectorOp::SelectN => {
            if n < 2 {
                return Err(bad(format!("{name} needs a predicate and at least one case, got {n} argument(s)")));
            }
            match args[0].ty {
                VectorType::Bool if n <= 3 => {}
                VectorType::I32 => {}
                t => return Err(bad(format!("{name} predicate of type {} with {} case(s)", t.name(), n - 1))),
            }
            all_of(ty, 1)?;
        }
        VectorOp::Convert => arity(1)?,
        VectorOp::Iota => {
            arity(0)?;
            kinds(ty.is_int(), "an integer type")?;
            let (stride, size) = iota_dims(imm);
            if stride == 0 || size == 0 {
                return Err(bad(format!("{name} stride {stride} and size {size} (both >= 1, 31 bits)")));
            }
        }
        VectorOp::Fma => {
            arity(3)?;
            kinds(ty.is_float(), "a float type")?;
            all_of(ty, 0)?;
            if FmaForm::from_code(imm).is_err() {
                return Err(bad(format!("{name} form {imm} (0: a*b+c, 1: a*b-c, 2: c-a*b)")));
            }
        }
    }
    Ok(VectorValueMeta {
        ty,
        // An iota counts along the array: never a scalar (of n > 1).
        scalar: op != VectorOp::Iota && args.iter().all(|a| a.scalar),
        const_at: (op == VectorOp::Const).then_some(imm_at),
        convert_of: (op == VectorOp::Convert).then_some(first_args[0]),
        compare_of: (matches!(op, VectorOp::Gt | VectorOp::Lt) && args[0].ty.is_float()).then_some((
            op,
            first_args[0],
            first_args[1],
        )),
    })
}

/// An iota's (stride, size) from its immediate: element `i` is
/// `(i / stride) % size` (the index along one dimension of a C-order
/// array: stride = the product of the later dimensions).
pub(super) fn iota_dims(imm: i64) -> (u64, u64) {
    let imm = imm as u64;
    (imm & 0x7fff_ffff, (imm >> 32) & 0x7fff_ffff)
}

/// A constant's immediate must be a canonical value of its type.
fn check_const(ty: VectorType, imm: i64) -> ProgramResult<()> {
    let ok = match ty.scalar() {
        Some(s) => {
            (s != scalar::ScalarType::Bool || (0..=1).contains(&imm)) && scalar::convert(s, imm as u64) == imm as u64
        }
        None if ty == VectorType::F32 => (0..=u32::MAX as i64).contains(&imm),
        None => true,
    };
    if !ok {
        return Err(bad(format!("constant {imm} is not a canonical {}", ty.name())));
    }
    Ok(())
}

/// Vector programs, as the [`program_words`] machinery sees them.
pub struct VectorPrograms;

impl ProgramKind for VectorPrograms {
    type Layout = VectorLayout;
    type Program<'a> = VectorProgram<'a>;
    type Scratch = VectorScratch;
    fn decode_layout(words: &[i64]) -> ProgramResult<VectorLayout> {
        decode_layout(words)
    }
    fn bad(message: String) -> ProgramError {
        bad(message)
    }
    fn program<'a>(words: &'a [i64], layout: LayoutRef<'a, VectorLayout>) -> VectorProgram<'a> {
        VectorProgram { words, layout }
    }
}

/// Decoded vector programs by their words.
pub type VectorDecodeCache = program_words::DecodeCache<VectorPrograms>;

/// A thread's decoded vector programs and scratch.
pub type VectorProgramState = program_words::ProgramState<VectorPrograms>;
