"""Builds scalar programs: straight-line rank-0 integer/bool arithmetic that
runs as one pure native call (`mosaic_rt.ffi.ops.scalar_program`) instead
of XLA fusions, each of which XLA:CPU compiles with LLVM whatever it
computes (benches/PERFORMANCE.md, "Native compute instead of XLA fusions").

The wire format, op names and type codes are the core's
(`mosaic_rt_programs::scalar`, exported as `_native.SCALAR_*`). While building,
a value is a `Ref`: an input is ``-(k + 1)``, instruction k is ``k``; they
are numbered the core's way (inputs first) when the program is emitted.
"""

from __future__ import annotations

import numpy as np

from mosaic_rt import _native
from mosaic_rt.ffi import ops as ffi_ops

Ref = int

OPS = _native.SCALAR_OPS
TYPES = _native.SCALAR_TYPES
# Keyed by the dtype itself: numpy's `dtype.name` is slow Python, and this
# runs for every value of every program at trace time.
_TYPE_CODES = {np.dtype(name): code for name, code in TYPES.items()}
MAX_VALUES = _native.SCALAR_MAX_VALUES
_FORMAT = _native.SCALAR_FORMAT
_I32 = np.dtype(np.int32)


def is_scalar_type(dtype) -> bool:
    """Whether scalar programs compute on ``dtype`` (ints and bool)."""
    try:
        return dtype in _TYPE_CODES or np.dtype(dtype) in _TYPE_CODES
    except TypeError:  # extended dtypes (semaphores, PRNG keys)
        return False


def canonical(value, dtype) -> int:
    """``value`` wrapped into ``dtype`` as the core keeps it, as an int64
    word: two's complement (numpy's integer cast wraps), 0/1 for bool,
    uint64's upper half as negative words."""
    dtype = np.dtype(dtype)
    if isinstance(value, (int, np.integer, np.bool_)) and dtype.kind in "iu":
        bits = 8 * dtype.itemsize
        v = int(value) & ((1 << bits) - 1)
        if dtype.kind == "i" and v >> (bits - 1):
            v -= 1 << bits
    else:
        v = int(np.asarray(value).astype(dtype))
    return v - (1 << 64) if v >= 1 << 63 else v


class ProgramBuilder:
    """One scalar program under construction."""

    def __init__(self):
        self._operands: list = []
        self._input_words: list[int] = []
        self._inputs_by_id: dict[int, Ref] = {}
        self._instrs: list[tuple[int, int, tuple[Ref, ...], int]] = []
        self._consts: dict[tuple[np.dtype, int], Ref] = {}
        self._seen: dict[tuple, Ref] = {}  # instructions, for common subexpressions
        self._dtypes: dict[Ref, np.dtype] = {}

    @property
    def num_values(self) -> int:
        return len(self._operands) + len(self._instrs)

    @property
    def num_inputs(self) -> int:
        return len(self._operands)

    def dtype(self, ref: Ref) -> np.dtype:
        return self._dtypes[ref]

    def input(self, value, dtype) -> Ref:
        """A traced operand (the same object is one input)."""
        ref = self._inputs_by_id.get(id(value))
        if ref is not None:
            return ref
        dtype = np.dtype(dtype)
        shape = tuple(np.shape(value))
        ref = -(len(self._operands) + 1)
        self._operands.append(value)
        self._input_words += [_TYPE_CODES[dtype], len(shape), *shape]
        self._inputs_by_id[id(value)] = ref
        self._dtypes[ref] = dtype
        return ref

    def const(self, value, dtype) -> Ref:
        dtype = np.dtype(dtype)
        word = canonical(value, dtype)
        key = (dtype, word)
        ref = self._consts.get(key)
        if ref is None:
            ref = self._consts[key] = self._add(OPS["const"], dtype, (), word)
        return ref

    def op(self, name: str, dtype, args, imm: int = 0) -> Ref:
        return self._add(OPS[name], np.dtype(dtype), tuple(args), int(imm))

    def _add(self, code, dtype, args, imm) -> Ref:
        # Ops are pure: an instruction equal to an earlier one is that one
        # (a group often looks up the same semaphore or adds 1 twice).
        instr = (code, _TYPE_CODES[dtype], args, imm)
        ref = self._seen.get(instr)
        if ref is None:
            ref = self._seen[instr] = len(self._instrs)
            self._instrs.append(instr)
            self._dtypes[ref] = dtype
        return ref

    def clamp_i32(self, ref: Ref, lo: int, hi: int) -> Ref:
        """``clamp(lo, ref, hi)`` of an int32 value."""
        return self.op("clamp", _I32, (self.const(lo, _I32), ref, self.const(hi, _I32)))

    def words(self, outputs) -> np.ndarray:
        n_in = len(self._operands)

        def number(ref):
            return -ref - 1 if ref < 0 else n_in + ref

        words = [_FORMAT, n_in, len(self._instrs), len(outputs), *self._input_words]
        for code, ty, args, imm in self._instrs:
            words += [code, ty, len(args), *map(number, args), imm]
        words += [number(r) for r in outputs]
        return np.asarray(words, np.int64)

    def emit(self, outputs) -> list:
        """The traced values of ``outputs`` (refs), by one native call
        (which returns each distinct ref once)."""
        if self.num_values > MAX_VALUES:
            raise ValueError(
                f"scalar program of {self.num_values} values (at most {MAX_VALUES}): a bug in mosaic_rt's run splitting"
            )
        distinct = list(dict.fromkeys(outputs))
        values = ffi_ops.scalar_program(self.words(distinct), self._operands, [self._dtypes[r] for r in distinct])
        by_ref = dict(zip(distinct, values))
        return [by_ref[r] for r in outputs]
