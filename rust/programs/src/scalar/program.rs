//! A scalar program: its wire format, validation and evaluation.
//!
//! Wire format (one int64 array, built by `mosaic_rt.interpret.native_compute.scalar_program`):
//!
//! ```text
//! FORMAT, n_inputs, n_instrs, n_outputs,
//! per input:  type, rank, dims[rank]            (rank 0: a scalar)
//! per instr:  op, type, n_args, args[n_args], imm
//! per output: value
//! ```
//!
//! Values are numbered inputs first, then one per instruction in order; an
//! instruction's arguments name earlier values. `type` is the result's
//! [`ScalarType`] code, `imm` the op's immediate (a constant's canonical
//! value, an integer power's exponent, else 0). Vector inputs (rank > 0)
//! are only read by `index`. Everything is checked once by
//! [`ScalarProgram::decode`]; evaluation then cannot fail.

use super::ops::{self, ScalarOp};
use super::types::ScalarType;
use crate::error::{ProgramError, ProgramResult};
use crate::program_words::{self, LayoutRef, ProgramKind, Reader};
#[cfg(test)]
use crate::program_words::{fingerprint, CACHED_PROGRAMS};

/// The format version, first word of every program.
pub const FORMAT: i64 = 1;
/// Most values (inputs plus instructions) in one program: the interpreter
/// splits longer runs, so evaluation needs no heap.
pub const MAX_VALUES: usize = 128;

/// What decoding learnt of a value (4 bytes: the table is re-made per call).
#[derive(Clone, Copy)]
struct ScalarValueMeta {
    ty: ScalarType,
    /// > 0 only for a vector input, whose dims start at word `dims_at`.
    rank: u8,
    dims_at: u16,
}

const NO_META: ScalarValueMeta = ScalarValueMeta { ty: ScalarType::Bool, rank: 0, dims_at: 0 };

/// The values of one evaluation (inputs, then one per instruction). An
/// evaluation writes every value before reading it, so one `Values` can be
/// reused across evaluations without clearing (1 KiB a call otherwise).
pub struct Values([u64; MAX_VALUES]);

impl Values {
    pub const fn new() -> Values {
        Values([0u64; MAX_VALUES])
    }
}

impl Default for Values {
    fn default() -> Self {
        Values::new()
    }
}

/// A validated program over its words.
pub struct ScalarProgram<'a> {
    words: &'a [i64],
    layout: LayoutRef<'a, ScalarLayout>,
}

/// What decoding learnt of a program's words (reusable for equal words).
#[derive(Clone, Copy)]
pub struct ScalarLayout {
    n_inputs: usize,
    n_values: usize,
    instrs_at: usize,
    outputs_at: usize,
    n_outputs: usize,
    meta: [ScalarValueMeta; MAX_VALUES],
}

#[cold]
fn bad(message: String) -> ProgramError {
    ProgramError::value(format!("scalar program: {message}"))
}

impl<'a> ScalarProgram<'a> {
    /// Parses and type-checks `words`.
    pub fn decode(words: &'a [i64]) -> ProgramResult<ScalarProgram<'a>> {
        Ok(ScalarProgram { words, layout: LayoutRef::Owned(Box::new(decode_layout(words)?)) })
    }
}

/// The checked layout of a program's words.
fn decode_layout(words: &[i64]) -> ProgramResult<ScalarLayout> {
    {
        let mut r = Reader { words, pos: 0, bad };
        let format = r.next("format")?;
        if format != FORMAT {
            return Err(bad(format!("format {format}, expected {FORMAT} (a mosaic_rt build mismatch)")));
        }
        let n_inputs = r.count("input count", MAX_VALUES)?;
        let n_instrs = r.count("instruction count", MAX_VALUES)?;
        let n_outputs = r.count("output count", MAX_VALUES)?;
        if n_inputs + n_instrs > MAX_VALUES {
            return Err(bad(format!("{} values, at most {MAX_VALUES}", n_inputs + n_instrs)));
        }
        let mut meta = [NO_META; MAX_VALUES];
        for m in meta.iter_mut().take(n_inputs) {
            let ty = ScalarType::from_code(r.next("input type")?).map_err(|e| bad(e.message))?;
            let rank = r.count("input rank", 8)?;
            let dims_at = u16::try_from(r.pos).map_err(|_| bad("inputs too long".to_string()))?;
            for _ in 0..rank {
                let d = r.next("input dim")?;
                if d < 1 {
                    return Err(bad(format!("vector input dimension {d} (must be >= 1)")));
                }
            }
            *m = ScalarValueMeta { ty, rank: rank as u8, dims_at };
        }
        let instrs_at = r.pos;
        for k in 0..n_instrs {
            let v = n_inputs + k;
            meta[v] = ScalarValueMeta { ty: check_instr(&mut r, &meta[..v], words)?, rank: 0, dims_at: 0 };
        }
        let outputs_at = r.pos;
        let n_values = n_inputs + n_instrs;
        for _ in 0..n_outputs {
            scalar_arg(&meta[..n_values], r.next("output")?)?;
        }
        if r.pos != words.len() {
            return Err(bad(format!("{} words after the outputs", words.len() - r.pos)));
        }
        Ok(ScalarLayout { n_inputs, n_values, instrs_at, outputs_at, n_outputs, meta })
    }
}

impl<'a> ScalarProgram<'a> {
    pub fn num_inputs(&self) -> usize {
        self.layout.n_inputs
    }

    pub fn num_outputs(&self) -> usize {
        self.layout.n_outputs
    }

    /// Type and dims (empty: a scalar) of input `i < num_inputs()`.
    pub fn input(&self, i: usize) -> (ScalarType, &'a [i64]) {
        let m = self.layout.meta[i];
        let at = m.dims_at as usize;
        (m.ty, &self.words[at..at + m.rank as usize])
    }

    /// Type of output `j < num_outputs()`.
    pub fn output_type(&self, j: usize) -> ScalarType {
        self.layout.meta[self.words[self.layout.outputs_at + j] as usize].ty
    }

    /// Evaluates the program: `inputs[i]` holds input i's native-endian
    /// elements (C order), each `outputs[j]` receives output j.
    pub fn run(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> ProgramResult<()> {
        if inputs.len() != self.layout.n_inputs || outputs.len() != self.layout.n_outputs {
            return Err(bad(format!(
                "{} inputs and {} outputs given, the program has {} and {}",
                inputs.len(),
                outputs.len(),
                self.layout.n_inputs,
                self.layout.n_outputs
            )));
        }
        for (i, buf) in inputs.iter().enumerate() {
            self.check_input(i, buf.len())?;
        }
        for (j, buf) in outputs.iter().enumerate() {
            if buf.len() != self.output_type(j).size() {
                return Err(bad(format!(
                    "output {j} has {} bytes, expected one {}",
                    buf.len(),
                    self.output_type(j).name()
                )));
            }
        }
        let values = self.eval(|i| inputs[i]);
        for (j, out) in outputs.iter_mut().enumerate() {
            let (ty, v) = self.output(&values, j);
            ty.write(v, out);
        }
        Ok(())
    }

    /// Checks that input `i` has `len` bytes (all its elements).
    pub fn check_input(&self, i: usize, len: usize) -> ProgramResult<()> {
        let (ty, dims) = self.input(i);
        let n: usize = dims.iter().map(|&d| d as usize).product();
        if len != n * ty.size() {
            return Err(bad(format!("input {i} has {len} bytes, expected {n} {}", ty.name())));
        }
        Ok(())
    }

    /// Every value of the program; `input(i)` gives input i's bytes, whose
    /// lengths the caller checked ([`ScalarProgram::check_input`]).
    pub fn eval<'b>(&self, input: impl Fn(usize) -> &'b [u8]) -> Values {
        let mut vals = Values::new();
        self.eval_into(&mut vals, input);
        vals
    }

    /// [`ScalarProgram::eval`] into `vals` (whatever it held before).
    pub fn eval_into<'b>(&self, vals: &mut Values, input: impl Fn(usize) -> &'b [u8]) {
        for i in 0..self.layout.n_inputs {
            if self.layout.meta[i].rank == 0 {
                vals.0[i] = self.layout.meta[i].ty.read(input(i), 0);
            }
        }
        let w = self.words;
        let mut pos = self.layout.instrs_at;
        for v in self.layout.n_inputs..self.layout.n_values {
            // Decoded already: every word below is known to be valid.
            let op = ScalarOp::ALL[w[pos] as usize];
            let ty = self.layout.meta[v].ty;
            let n = w[pos + 2] as usize;
            let args = &w[pos + 3..pos + 3 + n];
            let imm = w[pos + 3 + n];
            pos += 4 + n;
            let arg = |k: usize| vals.0[args[k] as usize];
            vals.0[v] = match op {
                ScalarOp::Const => imm as u64,
                ScalarOp::Neg | ScalarOp::Abs | ScalarOp::Sign | ScalarOp::Not => ops::unary(op, ty, arg(0)),
                ScalarOp::Clamp => ops::clamp(ty, arg(0), arg(1), arg(2)),
                ScalarOp::Convert => ops::convert(ty, arg(0)),
                ScalarOp::IntegerPow => ops::integer_pow(ty, arg(0), imm as u64),
                ScalarOp::SelectN => {
                    let which = self.layout.meta[args[0] as usize].ty;
                    arg(1 + ops::select_case(which, arg(0), n - 1))
                }
                ScalarOp::Index => self.index(&input, &vals.0, args),
                _ if op.is_comparison() => ops::binary(op, self.layout.meta[args[0] as usize].ty, arg(0), arg(1)),
                _ => ops::binary(op, ty, arg(0), arg(1)),
            };
        }
    }

    /// (type, canonical value) of output `j < num_outputs()`.
    #[inline]
    pub fn output(&self, values: &Values, j: usize) -> (ScalarType, u64) {
        let v = self.words[self.layout.outputs_at + j] as usize;
        (self.layout.meta[v].ty, values.0[v])
    }

    /// Element of vector input `args[0]` at the int32 starts `args[1..]`,
    /// each clamped into its dimension as `dynamic_slice` clamps.
    fn index<'b>(&self, input: &impl Fn(usize) -> &'b [u8], vals: &[u64], args: &[i64]) -> u64 {
        let vec = args[0] as usize;
        let (ty, dims) = self.input(vec);
        let mut flat = 0usize;
        for (k, &d) in dims.iter().enumerate() {
            let start = vals[args[1 + k] as usize];
            flat = flat * d as usize + ops::clamp_start(start, d as usize);
        }
        ty.read(input(vec), flat)
    }
}

/// Scalar programs, as the [`program_words`] machinery sees them.
pub struct ScalarPrograms;

impl ProgramKind for ScalarPrograms {
    type Layout = ScalarLayout;
    type Program<'a> = ScalarProgram<'a>;
    type Scratch = Values;
    fn decode_layout(words: &[i64]) -> ProgramResult<ScalarLayout> {
        decode_layout(words)
    }
    fn bad(message: String) -> ProgramError {
        bad(message)
    }
    fn program<'a>(words: &'a [i64], layout: LayoutRef<'a, ScalarLayout>) -> ScalarProgram<'a> {
        ScalarProgram { words, layout }
    }
}

/// Decoded scalar programs by their words.
pub type ScalarDecodeCache = program_words::DecodeCache<ScalarPrograms>;

/// A thread's decoded scalar programs and scratch.
pub type ScalarProgramState = program_words::ProgramState<ScalarPrograms>;

/// The type of scalar value `v` (an earlier value, not a vector input).
fn scalar_arg(meta: &[ScalarValueMeta], v: i64) -> ProgramResult<ScalarType> {
    let m = usize::try_from(v)
        .ok()
        .and_then(|i| meta.get(i))
        .ok_or_else(|| bad(format!("value {v} used before it is defined")))?;
    if m.rank != 0 {
        return Err(bad(format!("vector input {v} used as a scalar (only `index` reads vectors)")));
    }
    Ok(m.ty)
}

/// Checks one instruction at the reader and returns its result type.
fn check_instr(r: &mut Reader, meta: &[ScalarValueMeta], words: &[i64]) -> ProgramResult<ScalarType> {
    let code = r.next("op")?;
    let op = ScalarOp::from_code(code).map_err(|e| bad(e.message))?;
    let ty = ScalarType::from_code(r.next("result type")?).map_err(|e| bad(e.message))?;
    let n = r.count("argument count", MAX_VALUES)?;
    let args_at = r.pos;
    for _ in 0..n {
        r.next("argument")?;
    }
    let args = &words[args_at..args_at + n];
    let imm = r.next("immediate")?;
    let name = op.name();
    let arity = |want: usize| -> ProgramResult<()> {
        if n != want {
            return Err(bad(format!("{name} takes {want} argument(s), got {n}")));
        }
        Ok(())
    };
    let need_int = || -> ProgramResult<()> {
        if !ty.is_int() {
            return Err(bad(format!("{name} of bool")));
        }
        Ok(())
    };
    // Every argument has the result's type (the common case).
    let all_of = |t: ScalarType, from: usize| -> ProgramResult<()> {
        for &a in &args[from..] {
            let at = scalar_arg(meta, a)?;
            if at != t {
                return Err(bad(format!("{name} of {} given a {} argument", t.name(), at.name())));
            }
        }
        Ok(())
    };
    match op {
        ScalarOp::Const => {
            arity(0)?;
            let canonical = ops::convert(ty, imm as u64);
            if ty == ScalarType::Bool && imm as u64 > 1 || canonical != imm as u64 {
                return Err(bad(format!("constant {imm} is not a canonical {}", ty.name())));
            }
        }
        ScalarOp::Add | ScalarOp::Sub | ScalarOp::Mul | ScalarOp::Div | ScalarOp::Rem => {
            arity(2)?;
            need_int()?;
            all_of(ty, 0)?;
        }
        ScalarOp::ShiftLeft | ScalarOp::ShiftRightArithmetic | ScalarOp::ShiftRightLogical => {
            arity(2)?;
            need_int()?;
            all_of(ty, 0)?;
        }
        ScalarOp::Max | ScalarOp::Min | ScalarOp::And | ScalarOp::Or | ScalarOp::Xor => {
            arity(2)?;
            all_of(ty, 0)?;
        }
        ScalarOp::Neg | ScalarOp::Abs | ScalarOp::Sign => {
            arity(1)?;
            need_int()?;
            all_of(ty, 0)?;
        }
        ScalarOp::Not => {
            arity(1)?;
            all_of(ty, 0)?;
        }
        ScalarOp::Clamp => {
            arity(3)?;
            all_of(ty, 0)?;
        }
        ScalarOp::Eq | ScalarOp::Ne | ScalarOp::Lt | ScalarOp::Le | ScalarOp::Gt | ScalarOp::Ge => {
            arity(2)?;
            if ty != ScalarType::Bool {
                return Err(bad(format!("{name} returns bool, not {}", ty.name())));
            }
            all_of(scalar_arg(meta, args[0])?, 1)?;
        }
        ScalarOp::SelectN => {
            if n < 2 {
                return Err(bad(format!("{name} needs an index and at least one case, got {n} argument(s)")));
            }
            match scalar_arg(meta, args[0])? {
                ScalarType::Bool if n <= 3 => {}
                ScalarType::I32 => {}
                t => return Err(bad(format!("{name} index of type {} with {} case(s)", t.name(), n - 1))),
            }
            all_of(ty, 1)?;
        }
        ScalarOp::Convert => {
            arity(1)?;
            scalar_arg(meta, args[0])?;
        }
        ScalarOp::IntegerPow => {
            arity(1)?;
            need_int()?;
            all_of(ty, 0)?;
            if imm < 0 {
                return Err(bad(format!("{name} with negative exponent {imm}")));
            }
        }
        ScalarOp::Index => {
            let vec = args.first().copied().unwrap_or(-1);
            let m = usize::try_from(vec).ok().and_then(|i| meta.get(i)).filter(|m| m.rank > 0);
            let m = m.ok_or_else(|| bad(format!("{name} of value {vec}, which is not a vector input")))?;
            arity(1 + m.rank as usize)?;
            if m.ty != ty {
                return Err(bad(format!("{name} of a {} vector typed {}", m.ty.name(), ty.name())));
            }
            all_of(ScalarType::I32, 1)?;
        }
    }
    Ok(ty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ScalarType::*;

    /// Builds programs the way the Python side does.
    #[derive(Default)]
    struct ScalarProgramBuilder {
        inputs: Vec<i64>,
        n_in: i64,
        instrs: Vec<i64>,
        n_instr: i64,
        outputs: Vec<i64>,
    }

    impl ScalarProgramBuilder {
        fn input(&mut self, t: ScalarType, dims: &[i64]) -> i64 {
            self.inputs.extend([t.code(), dims.len() as i64]);
            self.inputs.extend(dims);
            self.n_in += 1;
            self.n_in - 1
        }
        fn op(&mut self, op: ScalarOp, t: ScalarType, args: &[i64], imm: i64) -> i64 {
            self.instrs.extend([op.code(), t.code(), args.len() as i64]);
            self.instrs.extend(args);
            self.instrs.push(imm);
            self.n_instr += 1;
            self.n_in + self.n_instr - 1
        }
        fn konst(&mut self, t: ScalarType, v: i64) -> i64 {
            self.op(ScalarOp::Const, t, &[], t.wrap(v as u64) as i64)
        }
        fn words(&self) -> Vec<i64> {
            let mut w = vec![FORMAT, self.n_in, self.n_instr, self.outputs.len() as i64];
            w.extend(&self.inputs);
            w.extend(&self.instrs);
            w.extend(&self.outputs);
            w
        }
    }

    fn i32s(xs: &[i32]) -> Vec<u8> {
        xs.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn run1(b: &ScalarProgramBuilder, inputs: &[&[u8]], out_size: usize) -> Vec<u8> {
        let words = b.words();
        let p = ScalarProgram::decode(&words).unwrap();
        let mut out = vec![0u8; out_size];
        p.run(inputs, &mut [&mut out[..]]).unwrap();
        out
    }

    #[test]
    fn remainder_of_jnp_runs_as_one_program() {
        // jnp.remainder(a, b) for int32, as jax writes it.
        let mut b = ScalarProgramBuilder::default();
        let (x, y) = (b.input(I32, &[]), b.input(I32, &[]));
        let zero = b.konst(I32, 0);
        let one = b.konst(I32, 1);
        let is0 = b.op(ScalarOp::Eq, Bool, &[y, zero], 0);
        let d = b.op(ScalarOp::SelectN, I32, &[is0, y, one], 0);
        let r = b.op(ScalarOp::Rem, I32, &[x, d], 0);
        let nz = b.op(ScalarOp::Ne, Bool, &[r, zero], 0);
        let rn = b.op(ScalarOp::Lt, Bool, &[r, zero], 0);
        let dn = b.op(ScalarOp::Lt, Bool, &[d, zero], 0);
        let diff = b.op(ScalarOp::Ne, Bool, &[rn, dn], 0);
        let fix = b.op(ScalarOp::And, Bool, &[diff, nz], 0);
        let sum = b.op(ScalarOp::Add, I32, &[r, d], 0);
        let out = b.op(ScalarOp::SelectN, I32, &[fix, r, sum], 0);
        b.outputs.push(out);
        for (a, m, want) in [(-1, 8, 7), (9, 8, 1), (-9, -8, -1), (7, -3, -2), (5, 0, 0)] {
            let got = run1(&b, &[&i32s(&[a]), &i32s(&[m])], 4);
            assert_eq!(got, i32s(&[want]), "{a} % {m}");
        }
    }

    #[test]
    fn index_clamps_like_dynamic_slice() {
        let mut b = ScalarProgramBuilder::default();
        let v = b.input(I32, &[2, 3]);
        let (i, j) = (b.input(I32, &[]), b.input(I32, &[]));
        let e = b.op(ScalarOp::Index, I32, &[v, i, j], 0);
        b.outputs.push(e);
        let data = i32s(&[10, 11, 12, 13, 14, 15]);
        for (i, j, want) in [(0, 0, 10), (1, 2, 15), (-1, 1, 11), (5, 9, 15), (1, -7, 13)] {
            assert_eq!(run1(&b, &[&data, &i32s(&[i]), &i32s(&[j])], 4), i32s(&[want]), "[{i}, {j}]");
        }
    }

    #[test]
    fn index_by_computed_values_and_constants() {
        let mut b = ScalarProgramBuilder::default();
        let v = b.input(I32, &[4]);
        let i = b.input(I32, &[]);
        let one = b.konst(I32, 1);
        let next = b.op(ScalarOp::Add, I32, &[i, one], 0);
        let e = b.op(ScalarOp::Index, I32, &[v, next], 0);
        let c = b.op(ScalarOp::Index, I32, &[v, one], 0);
        b.outputs.extend([e, c]);
        let words = b.words();
        let p = ScalarProgram::decode(&words).unwrap();
        let (mut o0, mut o1) = ([0u8; 4], [0u8; 4]);
        p.run(&[&i32s(&[5, 6, 7, 8]), &i32s(&[2])], &mut [&mut o0, &mut o1]).unwrap();
        assert_eq!((i32::from_ne_bytes(o0), i32::from_ne_bytes(o1)), (8, 6));
    }

    #[test]
    fn several_outputs_of_several_types() {
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I64, &[]);
        let c = b.konst(I64, -3);
        let lt = b.op(ScalarOp::Lt, Bool, &[x, c], 0);
        let narrow = b.op(ScalarOp::Convert, U8, &[x], 0);
        let p = b.op(ScalarOp::IntegerPow, I64, &[x], 3);
        b.outputs.extend([lt, narrow, p, x]);
        let words = b.words();
        let prog = ScalarProgram::decode(&words).unwrap();
        assert_eq!(prog.num_outputs(), 4);
        assert_eq!(prog.output_type(1), U8);
        let (mut o0, mut o1, mut o2, mut o3) = ([9u8; 1], [0u8; 1], [0u8; 8], [0u8; 8]);
        let input = (-300i64).to_ne_bytes();
        prog.run(&[&input], &mut [&mut o0, &mut o1, &mut o2, &mut o3]).unwrap();
        assert_eq!(o0, [1]);
        assert_eq!(o1, [(-300i64) as u8]);
        assert_eq!(i64::from_ne_bytes(o2), -27_000_000);
        assert_eq!(o3, input);
    }

    fn decode_err(words: &[i64]) -> String {
        match ScalarProgram::decode(words) {
            Err(e) => e.message,
            Ok(_) => panic!("decoded {words:?}"),
        }
    }

    #[test]
    fn malformed_programs_fail_at_decode_with_clear_messages() {
        assert!(decode_err(&[]).contains("truncated"));
        assert!(decode_err(&[7, 0, 0, 0]).contains("format 7"));
        // An add of bool, a forward reference, a type mismatch.
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(Bool, &[]);
        b.op(ScalarOp::Add, Bool, &[x, x], 0);
        assert!(decode_err(&b.words()).contains("add of bool"), "{}", decode_err(&b.words()));
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I32, &[]);
        b.op(ScalarOp::Add, I32, &[x, 5], 0);
        assert!(decode_err(&b.words()).contains("used before it is defined"));
        let mut b = ScalarProgramBuilder::default();
        let (x, y) = (b.input(I32, &[]), b.input(I8, &[]));
        b.op(ScalarOp::Mul, I32, &[x, y], 0);
        assert!(decode_err(&b.words()).contains("given a int8 argument"));
        // A vector read as a scalar, an index with the wrong arity.
        let mut b = ScalarProgramBuilder::default();
        let v = b.input(I32, &[4]);
        b.op(ScalarOp::Neg, I32, &[v], 0);
        assert!(decode_err(&b.words()).contains("vector input 0 used as a scalar"));
        let mut b = ScalarProgramBuilder::default();
        let v = b.input(I32, &[4]);
        b.op(ScalarOp::Index, I32, &[v], 0);
        assert!(decode_err(&b.words()).contains("takes 2 argument"));
        // Non-canonical constants, negative powers, comparisons typed int.
        let mut b = ScalarProgramBuilder::default();
        b.op(ScalarOp::Const, I8, &[], 200);
        assert!(decode_err(&b.words()).contains("not a canonical int8"));
        let mut b = ScalarProgramBuilder::default();
        b.op(ScalarOp::Const, Bool, &[], 2);
        assert!(decode_err(&b.words()).contains("not a canonical bool"));
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I32, &[]);
        b.op(ScalarOp::IntegerPow, I32, &[x], -1);
        assert!(decode_err(&b.words()).contains("negative exponent"));
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I32, &[]);
        b.op(ScalarOp::Lt, I32, &[x, x], 0);
        assert!(decode_err(&b.words()).contains("returns bool"));
        // select_n with a bool index and three cases; unknown codes; junk at the end.
        let mut b = ScalarProgramBuilder::default();
        let (p, x) = (b.input(Bool, &[]), b.input(I32, &[]));
        b.op(ScalarOp::SelectN, I32, &[p, x, x, x], 0);
        assert!(decode_err(&b.words()).contains("index of type bool with 3 case"));
        assert!(decode_err(&[FORMAT, 0, 1, 0, 99, 3, 0, 0]).contains("unknown op code 99"));
        assert!(decode_err(&[FORMAT, 1, 0, 0, 11, 0]).contains("unknown type code 11"));
        assert!(decode_err(&[FORMAT, 0, 0, 0, 5]).contains("1 words after"));
        assert!(decode_err(&[FORMAT, 1, 0, 0, 3, 1, 0]).contains("dimension 0"));
        assert!(decode_err(&[FORMAT, 0, 0, 1, 0]).contains("value 0 used before"));
        assert!(decode_err(&[FORMAT, 100, 100, 0]).contains("200 values, at most 128"));
    }

    #[test]
    fn the_decode_cache_matches_by_content() {
        let unary = |op: ScalarOp| {
            let mut b = ScalarProgramBuilder::default();
            let x = b.input(I32, &[]);
            let y = b.op(op, I32, &[x], 0);
            b.outputs.push(y);
            b.words()
        };
        let (neg, not) = (unary(ScalarOp::Neg), unary(ScalarOp::Not));
        assert_eq!(neg.len(), not.len(), "same length, different content");
        let mut cache = ScalarDecodeCache::new();
        let input = 5i32.to_ne_bytes();
        for _ in 0..2 {
            for (w, want) in [(&neg, -5i64), (&not, !5i64)] {
                let p = cache.decode(w).unwrap();
                assert_eq!(p.output(&p.eval(|_| &input[..]), 0).1, want as u64);
            }
        }
        assert_eq!(cache.len(), 2);
        assert!(cache.decode(&[FORMAT, 9]).is_err(), "bad programs are not cached");
        assert_eq!(cache.len(), 2);
        for k in 0..(CACHED_PROGRAMS as i64 + 5) {
            let mut b = ScalarProgramBuilder::default();
            let c = b.konst(I32, k);
            b.outputs.push(c);
            let words = b.words();
            let p = cache.decode(&words).unwrap();
            assert_eq!(p.output(&p.eval(|_| &[]), 0).1, k as u64);
        }
        assert_eq!(cache.len(), CACHED_PROGRAMS);
    }

    #[test]
    fn fingerprinted_lookups_check_the_fingerprint_and_match_by_address() {
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I32, &[]);
        let y = b.op(ScalarOp::Neg, I32, &[x], 0);
        b.outputs.push(y);
        let words = b.words();
        let mut other = words.clone();
        // Same length, another op (header 4 words, the input 2, then the op).
        assert_eq!(other[6], ScalarOp::Neg.code());
        other[6] = ScalarOp::Not.code();
        let input = 5i32.to_ne_bytes();
        let mut cache = ScalarDecodeCache::new();
        for _ in 0..2 {
            for (w, want) in [(&words, -5i64), (&other, !5i64)] {
                let p = cache.decode_fingerprinted(w, fingerprint(w)).unwrap();
                assert_eq!(p.output(&p.eval(|_| &input[..]), 0).1, want as u64);
            }
        }
        assert_eq!(cache.len(), 2);
        let e = cache.decode_fingerprinted(&words, fingerprint(&words) ^ 1).err().unwrap();
        assert!(e.message.contains("does not match its words"), "{}", e.message);
        // Other words at an address seen before (a freed program's) are
        // decoded, not taken for the old ones.
        let mut reused = words.clone();
        let at = reused.as_ptr();
        cache.decode_fingerprinted(&reused, fingerprint(&reused)).unwrap();
        reused.copy_from_slice(&other);
        assert_eq!(reused.as_ptr(), at);
        let p = cache.decode_fingerprinted(&reused, fingerprint(&reused)).unwrap();
        assert_eq!(p.output(&p.eval(|_| &input[..]), 0).1, !5i64 as u64);
    }

    #[test]
    fn reused_values_do_not_leak_into_the_next_evaluation() {
        // A long program, then a short one whose values overlap its slots.
        let mut long = ScalarProgramBuilder::default();
        let x = long.input(I32, &[]);
        let mut v = x;
        for _ in 0..20 {
            v = long.op(ScalarOp::Mul, I32, &[v, v], 0);
        }
        long.outputs.push(v);
        let mut short = ScalarProgramBuilder::default();
        let y = short.input(I32, &[]);
        let one = short.konst(I32, 1);
        let s = short.op(ScalarOp::Add, I32, &[y, one], 0);
        short.outputs.push(s);
        let (lw, sw) = (long.words(), short.words());
        let mut vals = Values::new();
        let three = 3i32.to_ne_bytes();
        ScalarProgram::decode(&lw).unwrap().eval_into(&mut vals, |_| &three[..]);
        let p = ScalarProgram::decode(&sw).unwrap();
        p.eval_into(&mut vals, |_| &three[..]);
        assert_eq!(p.output(&vals, 0).1, 4);
    }

    #[test]
    fn buffers_of_the_wrong_size_are_rejected() {
        let mut b = ScalarProgramBuilder::default();
        let x = b.input(I32, &[]);
        b.outputs.push(x);
        let words = b.words();
        let p = ScalarProgram::decode(&words).unwrap();
        let mut out = [0u8; 4];
        let e = p.run(&[&[0u8; 8]], &mut [&mut out]).unwrap_err();
        assert!(e.message.contains("input 0 has 8 bytes"), "{}", e.message);
        let mut small = [0u8; 2];
        let e = p.run(&[&[0u8; 4]], &mut [&mut small]).unwrap_err();
        assert!(e.message.contains("output 0 has 2 bytes"), "{}", e.message);
        let e = p.run(&[], &mut [&mut out]).unwrap_err();
        assert!(e.message.contains("0 inputs and 1 outputs given"), "{}", e.message);
    }
}
