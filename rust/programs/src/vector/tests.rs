//! Programs built by hand, run through decode and evaluation: edge values
//! per op and type, broadcasting, decode errors, the decode cache, and the
//! AVX2 build of every loop against the baseline one.

use super::ops::VectorOp;
use super::program::{VectorDecodeCache, VectorProgram, FORMAT, MAX_VALUES};
use super::scratch::VectorScratch;
use super::types::VectorType::{self, *};
use crate::scalar;

/// Builds programs the way the Python side does.
struct VectorProgramBuilder {
    n: i64,
    inputs: Vec<i64>,
    instrs: Vec<i64>,
    outputs: Vec<i64>,
    n_in: i64,
    n_instr: i64,
}

impl VectorProgramBuilder {
    fn new(n: usize) -> VectorProgramBuilder {
        VectorProgramBuilder { n: n as i64, inputs: vec![], instrs: vec![], outputs: vec![], n_in: 0, n_instr: 0 }
    }
    fn input(&mut self, t: VectorType, scalar: bool) -> i64 {
        self.inputs.extend([t.code(), scalar as i64]);
        self.n_in += 1;
        self.n_in - 1
    }
    fn op(&mut self, op: VectorOp, t: VectorType, args: &[i64], imm: i64) -> i64 {
        self.instrs.extend([op.code(), t.code(), args.len() as i64]);
        self.instrs.extend(args);
        self.instrs.push(imm);
        self.n_instr += 1;
        self.n_in + self.n_instr - 1
    }
    fn out(mut self, v: &[i64]) -> VectorProgramBuilder {
        self.outputs.extend(v);
        self
    }
    fn words(&self) -> Vec<i64> {
        let mut w = vec![FORMAT, self.n, self.n_in, self.n_instr, self.outputs.len() as i64];
        w.extend(&self.inputs);
        w.extend(&self.instrs);
        w.extend(&self.outputs);
        w
    }
}

fn bytes<T: Copy>(xs: &[T]) -> Vec<u8> {
    // SAFETY: test values are plain numbers without padding; the view is
    // copied out at once.
    unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const u8, std::mem::size_of_val(xs)) }.to_vec()
}

/// Runs `words` on `inputs`, chunks of `chunk` elements (None: the
/// default choice); returns each output's bytes.
fn run_chunks(words: &[i64], inputs: &[&[u8]], chunk: Option<usize>, simd: bool) -> Vec<Vec<u8>> {
    let p = VectorProgram::decode(words).unwrap();
    let mut outs: Vec<Vec<u8>> = (0..p.num_outputs()).map(|j| vec![0u8; p.len() * p.output_type(j).size()]).collect();
    let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
    p.run_chunked(inputs, &mut refs, &mut VectorScratch::new(), simd, chunk).unwrap();
    outs
}

/// Runs `words` on `inputs` in both builds and in one chunk of n against
/// short chunks (asserting all agree); returns each output's bytes.
fn run(words: &[i64], inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    let n = VectorProgram::decode(words).unwrap().len();
    let whole = run_chunks(words, &ins, Some(n), true);
    assert_eq!(whole, run_chunks(words, &ins, Some(n), false), "the AVX2 and baseline builds differ");
    for chunk in [None, Some(1), Some(3), Some(64)] {
        for simd in [true, false] {
            assert_eq!(whole, run_chunks(words, &ins, chunk, simd), "chunks of {chunk:?} (simd {simd}) differ");
        }
    }
    whole
}

fn f32s(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// `op` over two f32 arrays, as bit patterns.
fn f32_binary(op: VectorOp, a: &[f32], b: &[f32]) -> Vec<u32> {
    let mut p = VectorProgramBuilder::new(a.len());
    let (x, y) = (p.input(F32, false), p.input(F32, false));
    let r = p.op(op, if op.is_comparison() { Bool } else { F32 }, &[x, y], 0);
    let out = run(&p.out(&[r]).words(), &[bytes(a), bytes(b)]);
    if op.is_comparison() {
        out[0].iter().map(|&b| b as u32).collect()
    } else {
        f32s(&out[0])
    }
}

fn i32_binary(op: VectorOp, a: &[i32], b: &[i32]) -> Vec<i32> {
    let mut p = VectorProgramBuilder::new(a.len());
    let (x, y) = (p.input(I32, false), p.input(I32, false));
    let r = p.op(op, I32, &[x, y], 0);
    i32s(&run(&p.out(&[r]).words(), &[bytes(a), bytes(b)])[0])
}

const SUB: f32 = 1e-39;
const QNAN: u32 = 0x7fc0_0000;
const PAYLOAD: u32 = 0x7fc1_2345;
const DEFAULT_NAN: u32 = 0xffc0_0000;

fn nan(bits: u32) -> f32 {
    f32::from_bits(bits)
}

#[test]
fn float_arithmetic_flushes_subnormals_and_picks_the_first_nan() {
    let a = [1e-39f32 * 0.0 + SUB, 1.5e-38, nan(PAYLOAD), 1.0, 0.0, f32::INFINITY, nan(0x7f80_0001)];
    let b = [1e10f32, 0.5, nan(QNAN), nan(PAYLOAD), f32::INFINITY, f32::NEG_INFINITY, 1.0];
    assert_eq!(
        f32_binary(VectorOp::Mul, &a, &b),
        [0, 0, PAYLOAD, PAYLOAD, DEFAULT_NAN, 0xff80_0000, 0x7fc0_0001],
        "DAZ, FTZ, first NaN, lone NaN, 0*inf, quieted signaling NaN"
    );
    assert_eq!(f32_binary(VectorOp::Add, &[f32::INFINITY], &[f32::NEG_INFINITY]), [DEFAULT_NAN]);
    assert_eq!(f32_binary(VectorOp::Div, &[1.0, -1.0], &[SUB, SUB]), [0x7f80_0000, 0xff80_0000]);
    assert_eq!(f32_binary(VectorOp::Sub, &[SUB], &[-SUB]), [0]);
    // fmod: the divisor is flushed, the dividend and result are not.
    assert_eq!(
        f32_binary(VectorOp::Rem, &[SUB, 1.0, 0.5], &[1.0, SUB, 1.7632415e-38]),
        [SUB.to_bits(), DEFAULT_NAN, 0x0040_0000]
    );
}

#[test]
fn float_max_min_and_compares() {
    let a = [0.0f32, -0.0, 6.0, -6.0, nan(PAYLOAD), SUB, 1.0];
    let b = [-0.0f32, 0.0, nan(0xffc0_0001), nan(QNAN), 1.0, -1.0, nan(QNAN)];
    assert_eq!(f32_binary(VectorOp::Max, &a, &b), [0, 0, 0x7fc0_0001, QNAN, PAYLOAD, 0, QNAN]);
    assert_eq!(
        f32_binary(VectorOp::Min, &a, &b),
        [0x8000_0000, 0x8000_0000, 0xffc0_0001, 0xffc0_0000, PAYLOAD, 0xbf80_0000, QNAN]
    );
    assert_eq!(f32_binary(VectorOp::Eq, &[SUB, nan(QNAN), 0.0], &[0.0, nan(QNAN), -0.0]), [1, 0, 1]);
    assert_eq!(f32_binary(VectorOp::Ne, &[nan(QNAN)], &[1.0]), [1]);
    assert_eq!(f32_binary(VectorOp::Lt, &[nan(QNAN), -SUB, 1.0], &[1.0, 0.0, 2.0]), [0, 0, 1]);
    assert_eq!(f32_binary(VectorOp::Ge, &[nan(QNAN), 1.0], &[1.0, 1.0]), [0, 1]);
}

#[test]
fn integer_ops_are_the_scalar_programs() {
    let min = i32::MIN;
    assert_eq!(i32_binary(VectorOp::Div, &[7, min, -7, 5], &[0, -1, 2, -2]), [-1, min, -3, -2]);
    assert_eq!(i32_binary(VectorOp::Rem, &[7, min, -7], &[0, -1, 2]), [7, 0, -1]);
    assert_eq!(i32_binary(VectorOp::Add, &[i32::MAX], &[1]), [min]);
    assert_eq!(i32_binary(VectorOp::ShiftLeft, &[-5, -5, 1], &[32, -1, 31]), [0, 0, min]);
    assert_eq!(i32_binary(VectorOp::ShiftRightArithmetic, &[-5, 5], &[40, 40]), [-1, 0]);
    assert_eq!(i32_binary(VectorOp::ShiftRightLogical, &[-1, -1], &[31, 32]), [1, 0]);
    assert_eq!(i32_binary(VectorOp::Max, &[-3, 4], &[2, -9]), [2, 4]);
    // Every other integer type goes through the same per-element functions.
    for t in [I8, I16, I64, U8, U16, U32, U64] {
        let st = t.scalar().unwrap();
        let (lo, hi) = st.min_max();
        let mut p = VectorProgramBuilder::new(4);
        let (x, y) = (p.input(t, false), p.input(t, false));
        let outs: Vec<i64> =
            [VectorOp::Div, VectorOp::Rem, VectorOp::Sub, VectorOp::Mul, VectorOp::ShiftRightArithmetic]
                .iter()
                .map(|&op| p.op(op, t, &[x, y], 0))
                .collect();
        let xs = [lo, hi, 7, 0];
        let ys = [u64::MAX, 0, st.wrap(3), hi];
        let enc = |vs: &[u64]| vs.iter().flat_map(|&v| st.bytes(v)[..t.size()].to_vec()).collect::<Vec<u8>>();
        let got = run(&p.out(&outs).words(), &[enc(&xs), enc(&ys)]);
        for (k, op) in [
            scalar::ScalarOp::Div,
            scalar::ScalarOp::Rem,
            scalar::ScalarOp::Sub,
            scalar::ScalarOp::Mul,
            scalar::ScalarOp::ShiftRightArithmetic,
        ]
        .into_iter()
        .enumerate()
        {
            for i in 0..4 {
                let want = scalar::binary(op, st, st.wrap(xs[i]), st.wrap(ys[i]));
                assert_eq!(st.read(&got[k], i), want, "{t:?} {op:?} element {i}");
            }
        }
    }
}

#[test]
fn select_converts_and_fma() {
    let n = 5;
    let mut p = VectorProgramBuilder::new(n);
    let (x, w, f) = (p.input(F32, false), p.input(I32, false), p.input(Bool, false));
    let c = p.op(VectorOp::Const, F32, &[], 2.0f32.to_bits() as i64);
    let s3 = p.op(VectorOp::SelectN, F32, &[w, x, c, x], 0);
    let s2 = p.op(VectorOp::SelectN, F32, &[f, x, c], 0);
    let to_i8 = p.op(VectorOp::Convert, I8, &[x], 0);
    let to_bool = p.op(VectorOp::Convert, Bool, &[x], 0);
    let back = p.op(VectorOp::Convert, F64, &[x], 0);
    let fma = p.op(VectorOp::Fma, F32, &[x, x, c], 0);
    let nma = p.op(VectorOp::Fma, F32, &[x, x, c], 2);
    let words = p.out(&[s3, s2, to_i8, to_bool, back, fma, nma]).words();
    let xs = [1e10f32, -2.5, f32::NAN, SUB, 1.0 + f32::EPSILON];
    let out = run(&words, &[bytes(&xs), bytes(&[-4i32, 1, 7, 2, 0]), vec![1, 0, 1, 0, 0]]);
    assert_eq!(
        f32s(&out[0]),
        [1e10f32.to_bits(), 2.0f32.to_bits(), f32::NAN.to_bits(), SUB.to_bits(), (1.0 + f32::EPSILON).to_bits()]
    );
    assert_eq!(
        f32s(&out[1]),
        [2.0f32.to_bits(), (-2.5f32).to_bits(), 2.0f32.to_bits(), SUB.to_bits(), (1.0 + f32::EPSILON).to_bits()]
    );
    assert_eq!(out[2], [127u8, (-2i8) as u8, 0, 0, 1], "saturating, NaN -> 0");
    assert_eq!(out[3], [1, 1, 1, 0, 1], "a subnormal is false (DAZ), NaN is true");
    assert_eq!(out[4][24..32], 0f64.to_ne_bytes(), "DAZ of the input");
    let e = f32::EPSILON as f64;
    let fused = ((1.0 + e) * (1.0 + e) + 2.0) as f32;
    assert_eq!(f32s(&out[5])[4], fused.to_bits(), "one rounding");
    assert_eq!(f32s(&out[6])[4], ((2.0 - (1.0 + e) * (1.0 + e)) as f32).to_bits());
    assert_eq!(f32s(&out[6])[2], f32::NAN.to_bits(), "c - a*b returns a NaN a unnegated");
}

#[test]
fn scalars_broadcast_and_scalar_instructions_stay_scalar() {
    let mut p = VectorProgramBuilder::new(3);
    let (x, s) = (p.input(I32, false), p.input(I32, true));
    let two = p.op(VectorOp::Const, I32, &[], 2);
    let s2 = p.op(VectorOp::Mul, I32, &[s, two], 0);
    let r = p.op(VectorOp::Sub, I32, &[s2, x], 0);
    let out = run(&p.out(&[r, s2, two, x]).words(), &[bytes(&[1i32, 2, 3]), bytes(&[10i32])]);
    assert_eq!(i32s(&out[0]), [19, 18, 17]);
    assert_eq!(i32s(&out[1]), [20, 20, 20]);
    assert_eq!(i32s(&out[2]), [2, 2, 2]);
    assert_eq!(i32s(&out[3]), [1, 2, 3]);
}

#[test]
fn empty_arrays_and_misaligned_inputs() {
    let mut p = VectorProgramBuilder::new(0);
    let x = p.input(F64, false);
    let one = p.op(VectorOp::Const, F64, &[], 1f64.to_bits() as i64);
    let r = p.op(VectorOp::Add, F64, &[x, one], 0);
    assert_eq!(run(&p.out(&[r, one]).words(), &[vec![]]), [Vec::<u8>::new(), vec![]]);
    // An operand at an odd address is copied to scratch first.
    let mut p = VectorProgramBuilder::new(2);
    let x = p.input(F32, false);
    let r = p.op(VectorOp::Add, F32, &[x, x], 0);
    let words = p.out(&[r]).words();
    let prog = VectorProgram::decode(&words).unwrap();
    // A heap buffer (malloc aligns it), so `buf[1..]` is surely misaligned.
    #[allow(clippy::useless_vec)]
    let mut buf = vec![0u8; 9];
    buf[1..].copy_from_slice(&bytes(&[1.5f32, -2.0]));
    let mut out = [0u8; 8];
    prog.run(&[&buf[1..]], &mut [&mut out[..]], &mut VectorScratch::new()).unwrap();
    assert_eq!(f32s(&out), [3.0f32.to_bits(), (-4.0f32).to_bits()]);
}

#[test]
fn malformed_programs_are_value_errors() {
    let add = VectorOp::Add.code();
    let f = F32.code();
    let cases: &[(&[i64], &str)] = &[
        (&[], "truncated at word 0"),
        (&[2, 1, 0, 0, 0], "format 2"),
        (&[1, -1, 0, 0, 0], "element count -1"),
        (&[1, 1, MAX_VALUES as i64 + 1, 0, 0], "input count"),
        (&[1, 1, 40, 40, 0], "80 values"),
        (&[1, 1, 1, 0, 0, 9, 0], "unknown type code 9"),
        (&[1, 1, 1, 0, 0, f, 5], "input kind 5"),
        (&[1, 1, 0, 1, 0, 99, f, 0, 0], "unknown op code 99"),
        (&[1, 1, 1, 1, 0, f, 0, add, f, 2, 0, 1, 0], "value 1 used before"),
        (&[1, 1, 1, 1, 0, f, 0, add, 0, 2, 0, 0, 0], "add of bool"),
        (&[1, 1, 1, 1, 0, f, 0, add, 3, 2, 0, 0, 0], "add of int32 given a float32 argument"),
        (&[1, 1, 1, 1, 0, f, 0, VectorOp::Not.code(), f, 1, 0, 0], "not of float32"),
        (&[1, 1, 1, 1, 0, f, 0, VectorOp::SelectN.code(), f, 1, 0, 0], "needs a predicate"),
        (&[1, 1, 1, 1, 0, f, 0, VectorOp::SelectN.code(), f, 2, 0, 0, 0], "predicate of type float32"),
        (&[1, 1, 1, 1, 0, f, 0, VectorOp::Eq.code(), f, 2, 0, 0, 0], "eq returns bool"),
        (&[1, 1, 0, 1, 0, 0, 0, 0, 2], "constant 2 is not a canonical bool"),
        (&[1, 1, 0, 1, 0, 0, f, 0, 1 << 32], "not a canonical float32"),
        (&[1, 1, 0, 1, 0, 0, 5, 0, 256], "not a canonical uint8"),
        (&[1, 1, 1, 1, 0, f, 0, VectorOp::Fma.code(), f, 3, 0, 0, 0, 7], "fma form 7"),
        (&[1, 1, 0, 0, 1, 0], "value 0 used before"),
        (&[1, 1, 0, 0, 0, 5], "1 words after the outputs"),
    ];
    for (words, want) in cases {
        let e = VectorProgram::decode(words).err().unwrap_or_else(|| panic!("{words:?} decoded"));
        assert_eq!(e.kind, crate::ProgramErrorKind::Value);
        assert!(e.message.starts_with("vector program: ") && e.message.contains(want), "{words:?}: {}", e.message);
    }
}

#[test]
fn buffers_of_the_wrong_size_are_value_errors() {
    let mut p = VectorProgramBuilder::new(2);
    let x = p.input(F32, false);
    let words = p.out(&[x]).words();
    let prog = VectorProgram::decode(&words).unwrap();
    let mut out = [0u8; 8];
    let e = prog.run(&[&[0u8; 4]], &mut [&mut out[..]], &mut VectorScratch::new()).unwrap_err();
    assert!(e.message.contains("input 0 has 4 bytes, expected 2 float32"), "{}", e.message);
    let e = prog.run(&[&[0u8; 8]], &mut [&mut out[..4]], &mut VectorScratch::new()).unwrap_err();
    assert!(e.message.contains("output 0 has 4 bytes"), "{}", e.message);
    let e = prog.run(&[], &mut [&mut out[..]], &mut VectorScratch::new()).unwrap_err();
    assert!(e.message.contains("0 inputs and 1 outputs given, the program has 1 and 1"), "{}", e.message);
}

#[test]
fn the_cache_decodes_once_and_checks_fingerprints() {
    let mut p = VectorProgramBuilder::new(1);
    let x = p.input(I32, false);
    let words = p.out(&[x]).words();
    let mut cache = VectorDecodeCache::new();
    let fp = scalar::fingerprint(&words);
    assert_eq!(cache.decode_fingerprinted(&words, fp).unwrap().num_outputs(), 1);
    assert_eq!(cache.decode_fingerprinted(&words, fp).unwrap().num_inputs(), 1);
    let e = cache.decode_fingerprinted(&words[..4], fp).err().unwrap();
    assert!(e.message.contains("does not match its words"), "{}", e.message);
    assert!(cache.decode(&[1, 2]).is_err(), "errors are not cached as programs");
    for k in 0..40 {
        let mut p = VectorProgramBuilder::new(k);
        let x = p.input(U8, false);
        let w = p.out(&[x]).words();
        assert_eq!(cache.decode(&w).unwrap().len(), k, "eviction keeps the right layouts");
    }
}

/// Pseudo-random bytes (xorshift), with special float patterns mixed in.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match (s >> 60, i % 4) {
                (0, 3) => 0x7f, // exponent all ones (inf/NaN) or near it
                (1, 3) => 0x00, // tiny: subnormals and zeros
                (2, 3) => 0x80,
                _ => s as u8,
            }
        })
        .collect()
}

#[test]
fn every_op_and_type_gives_the_same_bits_in_both_builds() {
    let n = 77; // not a multiple of any vector width: tails run too
    for t in VectorType::ALL {
        let len = n * t.size();
        let inputs = [noise(len, 1), noise(len, 2), noise(t.size(), 3)];
        let program = |ops: &dyn Fn(&mut VectorProgramBuilder, [i64; 3]) -> Vec<i64>| {
            let mut p = VectorProgramBuilder::new(n);
            let xyz = [p.input(t, false), p.input(t, false), p.input(t, true)];
            let outs = ops(&mut p, xyz);
            p.out(&outs).words()
        };
        for op in VectorOp::ALL {
            let ok = match op {
                VectorOp::Const | VectorOp::SelectN | VectorOp::Convert | VectorOp::Iota => false,
                VectorOp::Add
                | VectorOp::Sub
                | VectorOp::Mul
                | VectorOp::Div
                | VectorOp::Rem
                | VectorOp::Neg
                | VectorOp::Abs => t != Bool,
                VectorOp::And | VectorOp::Or | VectorOp::Xor | VectorOp::Not => !t.is_float(),
                VectorOp::ShiftLeft | VectorOp::ShiftRightArithmetic | VectorOp::ShiftRightLogical => t.is_int(),
                VectorOp::Fma => t.is_float(),
                _ => true,
            };
            if !ok {
                continue;
            }
            let ty = if op.is_comparison() { Bool } else { t };
            let arity = match op {
                VectorOp::Neg | VectorOp::Abs | VectorOp::Not => 1,
                VectorOp::Fma => 3,
                _ => 2,
            };
            let forms = if op == VectorOp::Fma { 3 } else { 1 };
            let words = program(&|p, [x, y, z]| {
                let mut outs = vec![];
                for args in [[x, y, x], [z, x, y], [x, z, z]] {
                    for form in 0..forms {
                        outs.push(p.op(op, ty, &args[..arity], form));
                    }
                }
                outs
            });
            run(&words, &inputs); // asserts both builds agree
        }
        let words =
            program(&|p, [x, _, _]| VectorType::ALL.iter().map(|&to| p.op(VectorOp::Convert, to, &[x], 0)).collect());
        run(&words, &inputs);
        let words = program(&|p, [x, y, z]| {
            let f = p.op(VectorOp::Lt, Bool, &[x, y], 0);
            let w = p.op(VectorOp::Convert, I32, &[x], 0);
            vec![p.op(VectorOp::SelectN, t, &[f, x, y], 0), p.op(VectorOp::SelectN, t, &[w, z, y, x], 0)]
        });
        run(&words, &inputs);
    }
}

/// `x op c` over f32 `xs` with `c` a constant on the right (or left).
fn f32_with_constant(op: VectorOp, xs: &[f32], c: f32, left: bool) -> Vec<u32> {
    let mut p = VectorProgramBuilder::new(xs.len());
    let x = p.input(F32, false);
    let k = p.op(VectorOp::Const, F32, &[], c.to_bits() as i64);
    let args = if left { [k, x] } else { [x, k] };
    let r = p.op(op, F32, &args, 0);
    f32s(&run(&p.out(&[r]).words(), &[bytes(xs)])[0])
}

#[test]
fn constant_operands_are_rewritten_as_xla_does() {
    let xs = [SUB, -SUB, nan(0x7f80_0001), 2.5, -0.0];
    let same: Vec<u32> = xs.iter().map(|x| x.to_bits()).collect();
    let negated: Vec<u32> = xs.iter().map(|x| x.to_bits() ^ 0x8000_0000).collect();
    assert_eq!(f32_with_constant(VectorOp::Mul, &xs, 1.0, false), same, "x * 1 is x, unflushed");
    assert_eq!(f32_with_constant(VectorOp::Mul, &xs, 1.0, true), same);
    assert_eq!(f32_with_constant(VectorOp::Add, &xs, 0.0, false), same, "-0 + 0 is -0 too");
    assert_eq!(f32_with_constant(VectorOp::Sub, &xs, -0.0, false), same);
    assert_eq!(f32_with_constant(VectorOp::Div, &xs, 1.0, false), same);
    assert_eq!(f32_with_constant(VectorOp::Max, &xs, f32::NEG_INFINITY, true), same);
    assert_eq!(f32_with_constant(VectorOp::Min, &xs, f32::INFINITY, false), same);
    assert_eq!(f32_with_constant(VectorOp::Mul, &xs, -1.0, false), negated, "x * -1 is neg x");
    assert_eq!(f32_with_constant(VectorOp::Div, &xs, -1.0, false), negated);
    assert_eq!(f32_with_constant(VectorOp::Sub, &xs, -0.0, true), negated, "-0 - x is neg x");
    assert_eq!(f32_with_constant(VectorOp::Sub, &[SUB], 0.0, true), [0], "+0 - x is computed");
    // x / c is x * (1/c): not the true quotient.
    let q = f32_with_constant(VectorOp::Div, &[2.5, 3.0], 3.0, false);
    assert_eq!(q, [(2.5f32 * (1.0 / 3.0f32)).to_bits(), (3.0f32 * (1.0 / 3.0f32)).to_bits()]);
    assert_ne!(q[0], (2.5f32 / 3.0).to_bits());
    assert_eq!(f32_with_constant(VectorOp::Div, &[2.5], 3.0, true), [(3.0f32 / 2.5).to_bits()], "c / x is a division");
    // An op with a NaN constant is that NaN, quieted; x - NaN negates it.
    let c = nan(0x7f80_0123);
    assert_eq!(f32_with_constant(VectorOp::Add, &[1.0, nan(PAYLOAD)], c, false), [0x7fc0_0123; 2]);
    assert_eq!(f32_with_constant(VectorOp::Sub, &[1.0], c, false), [0xffc0_0123]);
    assert_eq!(f32_with_constant(VectorOp::Min, &[-0.0], c, true), [0x7fc0_0123]);
    // Otherwise a constant on the left of a commutative op moves right.
    assert_eq!(f32_with_constant(VectorOp::Max, &[nan(0xffc0_0001)], 2.0, true), [0xffc0_0001]);
}

#[test]
fn a_float_convert_round_trip_is_dropped() {
    let mut p = VectorProgramBuilder::new(2);
    let x = p.input(F32, false);
    let wide = p.op(VectorOp::Convert, F64, &[x], 0);
    let back = p.op(VectorOp::Convert, F32, &[wide], 0);
    let out = run(&p.out(&[back, wide]).words(), &[bytes(&[SUB, nan(0x7f80_0001)])]);
    assert_eq!(f32s(&out[0]), [SUB.to_bits(), 0x7f80_0001]);
    assert_eq!(&out[1][..8], 0f64.to_ne_bytes(), "the widening alone flushes");
}

#[test]
fn a_strict_compare_selecting_its_own_operands_flushes_the_choice() {
    let (xs, ys) = ([SUB, 2.0], [-1.0f32, -SUB]);
    let bits = |v: [f32; 2]| v.map(f32::to_bits).to_vec();
    for (cmp, want) in [
        (VectorOp::Gt, bits([0.0, 2.0])),
        (VectorOp::Lt, bits([-1.0, -0.0])),
        (VectorOp::Ge, bits([SUB, 2.0])),
        (VectorOp::Le, bits([-1.0, -SUB])),
    ] {
        let mut p = VectorProgramBuilder::new(2);
        let (x, y) = (p.input(F32, false), p.input(F32, false));
        let c = p.op(cmp, Bool, &[x, y], 0);
        let s = p.op(VectorOp::SelectN, F32, &[c, y, x], 0); // c ? x : y
        assert_eq!(f32s(&run(&p.out(&[s]).words(), &[bytes(&xs), bytes(&ys)])[0]), want, "{cmp:?}");
    }
}

#[test]
fn a_scalar_output_fills_a_one_element_buffer_once() {
    let mut p = VectorProgramBuilder::new(3);
    let (x, s) = (p.input(I32, false), p.input(I32, true));
    let s1 = p.op(VectorOp::Add, I32, &[s, s], 0);
    let r = p.op(VectorOp::Xor, I32, &[x, s1], 0);
    let words = p.out(&[r, s1]).words();
    let prog = VectorProgram::decode(&words).unwrap();
    assert!(!prog.output_is_scalar(0) && prog.output_is_scalar(1));
    let (mut arr, mut one) = ([0u8; 12], [0u8; 4]);
    let inputs: [&[u8]; 2] = [&bytes(&[1i32, 2, 3]), &bytes(&[5i32])];
    prog.run(&inputs, &mut [&mut arr[..], &mut one[..]], &mut VectorScratch::new()).unwrap();
    assert_eq!(i32s(&arr), [11, 8, 9]);
    assert_eq!(i32s(&one), [10]);
    // An array output still needs all n elements.
    let e = prog.run(&inputs, &mut [&mut arr[..4], &mut one[..]], &mut VectorScratch::new()).unwrap_err();
    assert!(e.message.contains("output 0 has 4 bytes"), "{}", e.message);
    // Over several chunks the one element is written once, the array in full.
    let mut p = VectorProgramBuilder::new(200);
    let (x, s) = (p.input(I32, false), p.input(I32, true));
    let s1 = p.op(VectorOp::Add, I32, &[s, s], 0);
    let r = p.op(VectorOp::Xor, I32, &[x, s1], 0);
    let prog_words = p.out(&[r, s1]).words();
    let prog = VectorProgram::decode(&prog_words).unwrap();
    let xs: Vec<i32> = (0..200).collect();
    let (mut arr, mut one) = (vec![0u8; 800], [0u8; 4]);
    let inputs: [&[u8]; 2] = [&bytes(&xs), &bytes(&[5i32])];
    for simd in [true, false] {
        prog.run_chunked(&inputs, &mut [&mut arr[..], &mut one[..]], &mut VectorScratch::new(), simd, Some(64))
            .unwrap();
        assert_eq!(i32s(&arr), xs.iter().map(|x| x ^ 10).collect::<Vec<_>>());
        assert_eq!(i32s(&one), [10]);
    }
}

/// `bytes` at an odd address (so it is copied to scratch, chunk by chunk).
fn misaligned(bytes: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; bytes.len() + 1];
    v[1..].copy_from_slice(bytes);
    v
}

/// A program of every rewrite kind, scalar and misaligned inputs, and
/// outputs that are inputs, constants, scalars and aliases.
fn every_rewrite(n: usize) -> Vec<i64> {
    let mut p = VectorProgramBuilder::new(n);
    let (x, y, s) = (p.input(F32, false), p.input(F32, false), p.input(F32, true));
    let (u, k) = (p.input(U32, false), p.input(U32, true));
    let f = |p: &mut VectorProgramBuilder, c: f32| p.op(VectorOp::Const, F32, &[], c.to_bits() as i64);
    let (one, minus_one, zero, three) = (f(&mut p, 1.0), f(&mut p, -1.0), f(&mut p, 0.0), f(&mut p, 3.0));
    let nan = p.op(VectorOp::Const, F32, &[], 0x7f80_0123);
    let mut outs = vec![
        p.op(VectorOp::Mul, F32, &[x, one], 0),       // alias
        p.op(VectorOp::Add, F32, &[x, zero], 0),      // alias
        p.op(VectorOp::Max, F32, &[y, y], 0),         // alias
        p.op(VectorOp::Mul, F32, &[y, minus_one], 0), // neg
        p.op(VectorOp::Add, F32, &[three, y], 0),     // swap
        p.op(VectorOp::Sub, F32, &[x, three], 0),     // add negated
        p.op(VectorOp::Div, F32, &[y, three], 0),     // mul reciprocal
        p.op(VectorOp::Add, F32, &[x, nan], 0),       // fill, array
        p.op(VectorOp::Sub, F32, &[s, nan], 0),       // fill, scalar
    ];
    let gt = p.op(VectorOp::Gt, Bool, &[x, y], 0);
    outs.push(p.op(VectorOp::SelectN, F32, &[gt, y, x], 0)); // flushed select
    let wide = p.op(VectorOp::Convert, F64, &[x], 0);
    outs.push(p.op(VectorOp::Convert, F32, &[wide], 0)); // alias of x
    let s3 = p.op(VectorOp::Mul, F32, &[s, three], 0); // a scalar instruction
    outs.push(p.op(VectorOp::Fma, F32, &[x, y, s3], 0));
    let c16 = p.op(VectorOp::Const, U32, &[], 16);
    let uk = p.op(VectorOp::Mul, U32, &[u, k], 0);
    let hi = p.op(VectorOp::ShiftRightLogical, U32, &[uk, c16], 0);
    let mixed = p.op(VectorOp::Xor, U32, &[hi, u], 0);
    let lt = p.op(VectorOp::Lt, Bool, &[u, k], 0);
    outs.push(p.op(VectorOp::SelectN, U32, &[lt, uk, mixed], 0));
    outs.extend([mixed, s3, wide, x, s, k, one, c16]);
    p.out(&outs).words()
}

#[test]
fn chunks_of_any_length_give_the_bits_of_one_chunk() {
    let words = every_rewrite(1 << 20);
    let prog = VectorProgram::decode(&words).unwrap();
    // x and s misaligned (copied to scratch), y, u, k read in place.
    let default = prog.layout.plan(&[false, true, false, true, true], None).chunk;
    assert!(default % 64 == 0 && (64..1 << 20).contains(&default), "{default}");
    for (chunk, of) in [(Some(64), 64), (Some(100), 100), (None, default)] {
        for n in [of - 1, of, of + 1, 3 * of + 7] {
            let words = every_rewrite(n);
            let (x, y, u) = (misaligned(&noise(4 * n, 11)), noise(4 * n, 12), noise(4 * n, 13));
            let (s, k) = (misaligned(&noise(4, 14)), noise(4, 15));
            let inputs: [&[u8]; 5] = [&x[1..], &y, &s[1..], &u, &k];
            let whole = run_chunks(&words, &inputs, Some(n), true);
            for simd in [true, false] {
                assert_eq!(run_chunks(&words, &inputs, chunk, simd), whole, "n {n}, chunks of {chunk:?}");
            }
        }
    }
}

/// xorshift64.
struct Xorshift64(u64);

impl Xorshift64 {
    fn below(&mut self, k: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % k as u64) as usize
    }
}

/// A random well-typed program over uint32, float32 and bool values, and
/// its inputs (some scalar, some misaligned).
fn random_program(rng: &mut Xorshift64, n: usize) -> (Vec<i64>, Vec<Vec<u8>>, Vec<usize>) {
    let mut p = VectorProgramBuilder::new(n);
    let mut values: Vec<(i64, VectorType)> = vec![];
    let (mut inputs, mut offsets) = (vec![], vec![]);
    for _ in 0..1 + rng.below(4) {
        let (t, scalar) = ([U32, F32][rng.below(2)], rng.below(3) == 0);
        values.push((p.input(t, scalar), t));
        let offset = rng.below(2);
        let mut bytes = vec![0u8; offset];
        bytes.extend(noise(if scalar { 4 } else { 4 * n }, rng.below(1 << 30) as u64));
        inputs.push(bytes);
        offsets.push(offset);
    }
    let consts = [1.0f32, -1.0, 0.0, -0.0, 3.0, f32::INFINITY, f32::NEG_INFINITY, nan(0x7f80_0123), SUB];
    for _ in 0..1 + rng.below(30) {
        let t = [U32, F32][rng.below(2)];
        let of_t: Vec<i64> = values.iter().filter(|v| v.1 == t).map(|v| v.0).collect();
        let kind = if of_t.is_empty() { 0 } else { rng.below(7) };
        let pick = |rng: &mut Xorshift64| of_t[rng.below(of_t.len())];
        let v = match kind {
            0 if t == F32 => p.op(VectorOp::Const, F32, &[], consts[rng.below(consts.len())].to_bits() as i64),
            0 => p.op(VectorOp::Const, U32, &[], rng.below(1 << 32) as i64),
            1 => {
                let ops: &[VectorOp] = if t == F32 {
                    &[VectorOp::Add, VectorOp::Sub, VectorOp::Mul, VectorOp::Div, VectorOp::Max, VectorOp::Min]
                } else {
                    &[
                        VectorOp::Add,
                        VectorOp::Sub,
                        VectorOp::Mul,
                        VectorOp::Xor,
                        VectorOp::And,
                        VectorOp::Or,
                        VectorOp::ShiftLeft,
                        VectorOp::ShiftRightLogical,
                        VectorOp::Max,
                    ]
                };
                let (a, b) = (pick(rng), pick(rng));
                p.op(ops[rng.below(ops.len())], t, &[a, b], 0)
            }
            2 => {
                let op = if t == F32 { [VectorOp::Neg, VectorOp::Abs][rng.below(2)] } else { VectorOp::Not };
                p.op(op, t, &[pick(rng)], 0)
            }
            3 | 4 => {
                let (a, b) = (pick(rng), pick(rng));
                let c = p.op([VectorOp::Gt, VectorOp::Lt, VectorOp::Eq][rng.below(3)], Bool, &[a, b], 0);
                values.push((c, Bool));
                // Sometimes the compare's own operands: a flushed select.
                let cases = if kind == 3 { [b, a] } else { [pick(rng), pick(rng)] };
                p.op(VectorOp::SelectN, t, &[c, cases[0], cases[1]], 0)
            }
            5 => {
                let from = values[rng.below(values.len())];
                p.op(VectorOp::Convert, t, &[from.0], 0)
            }
            _ if t == F32 => {
                let args = [pick(rng), pick(rng), pick(rng)];
                p.op(VectorOp::Fma, F32, &args, rng.below(3) as i64)
            }
            _ => p.op(VectorOp::Mul, U32, &[pick(rng), pick(rng)], 0),
        };
        values.push((v, t));
    }
    let outs: Vec<i64> = (0..1 + rng.below(5)).map(|_| values[rng.below(values.len())].0).collect();
    (p.out(&outs).words(), inputs, offsets)
}

#[test]
fn random_programs_give_the_bits_of_one_chunk_in_any_chunks() {
    let mut rng = Xorshift64(0x5eed_0fc4_0ac5);
    for case in 0..300 {
        let n = if case % 30 == 0 { 2000 + rng.below(3000) } else { 1 + rng.below(300) };
        let (words, inputs, offsets) = random_program(&mut rng, n);
        let ins: Vec<&[u8]> = inputs.iter().zip(&offsets).map(|(b, &o)| &b[o..]).collect();
        let whole = run_chunks(&words, &ins, Some(n), true);
        let chunk = 1 + rng.below(n + 2);
        for (c, simd) in [(Some(chunk), true), (Some(chunk), false), (None, true)] {
            assert_eq!(run_chunks(&words, &ins, c, simd), whole, "case {case}: n {n}, chunks of {c:?}, {words:?}");
        }
    }
}

#[test]
fn iota_counts_along_a_dimension_across_chunks() {
    // A (3, 100) array: rows (stride 100, size 3) and columns (stride 1, size 100).
    let mut p = VectorProgramBuilder::new(300);
    let x = p.input(I32, false);
    let rows = p.op(VectorOp::Iota, I32, &[], 100 | (3 << 32));
    let cols = p.op(VectorOp::Iota, U32, &[], 1 | (100 << 32));
    let r = p.op(VectorOp::Add, I32, &[x, rows], 0);
    let out = run(&p.out(&[r, cols]).words(), &[bytes(&[10i32; 300])]);
    let want: Vec<i32> = (0..300).map(|i| 10 + i / 100).collect();
    assert_eq!(i32s(&out[0]), want);
    let cols: Vec<u32> = out[1].chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
    assert_eq!(cols, (0..300).map(|i| i % 100).collect::<Vec<u32>>());
    // A zero stride or size, a float iota: value errors.
    for (ty, imm) in [(I32, 3 << 32), (I32, 1), (F32, 1 | (3 << 32))] {
        let mut p = VectorProgramBuilder::new(3);
        let v = p.op(VectorOp::Iota, ty, &[], imm);
        assert!(VectorProgram::decode(&p.out(&[v]).words()).is_err(), "{ty:?} {imm}");
    }
}
