"""Straight-line runs of native ops, emitted as one ``batch`` call.

Each custom call adds to a cold call's XLA compile inside a shard_map
(plus lowering and tracing), whatever it does (benches/PERFORMANCE.md,
"Native compute instead of XLA fusions"). The token-threaded
ops of a kernel block that no XLA compute separates need not be separate
calls, and deferring an op with no result but the token is free: only the
next native op reads that token. So an op without results returns a
:class:`Pending` token instead of emitting anything; the next op on the
chain joins it, and the run is emitted as one ``batch`` call (see
``rust/ffi/src/ops/batch.rs``) when an op with results ends it or when the
token leaves the chain (``ffi.ops.materialize``: control flow, a block's
end, an op that cannot join).

An op with results may stay pending too when its caller can take a
:class:`Lazy` placeholder for each result (a load whose value goes into the
interpreter's environment): a later member may then read it inside the same
call (the native side passes it the batch's result buffer), and a pure
vector program reading it joins the run as a member without a token
(`extend_silently`). Reading the value any other way emits the run first
(`mosaic_rt.ffi.emit.realize`). A SparseCore row's `load -> vector program
-> store` is then one member each of one call, not three calls.

This module only keeps the books (members, operand sharing, the wire
encoding); `mosaic_rt.ffi.ops` emits the calls.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mosaic_rt import _native
from mosaic_rt import jax_internals as jx

# Op codes of the ops a batch may hold (the index in the native table).
CODES = {name: code for code, name in enumerate(_native.BATCH_OPS)}
MAX_MEMBERS, MAX_MEMBER_ARGS, MAX_MEMBER_RETS, MAX_ATTRS = _native.BATCH_LIMITS
# Member k's attribute `name` is `m{k}_{name}` with k of this many digits
# for every member: XLA sorts attributes by name, and the native side then
# finds each member's as one run, in member order.
_MEMBER_DIGITS = len(str(MAX_MEMBERS - 1))


@dataclasses.dataclass(frozen=True)
class Member:
    """One deferred op: its target, result ``(shape, dtype)`` pairs (the
    token's excluded), operands (the token's excluded; a `Lazy` is an
    earlier member's result) and attributes; ``lazy``: the placeholders of
    its results, filled in when it is emitted; ``tokenless``: a pure op
    (no token operand or result)."""

    target: str
    results: tuple
    operands: tuple
    attrs: dict
    lazy: tuple = ()
    tokenless: bool = False


class Lazy:
    """A pending member's result: its shape and dtype now, its traced value
    (`value`) once the run holding it is emitted. ``pending``: the pending
    token whose run holds the member."""

    __slots__ = ("shape", "dtype", "pending", "value")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.pending = None
        self.value = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        state = "pending" if self.value is None else "emitted"
        return f"Lazy({self.dtype}{list(self.shape)}, {state})"


class Pending:
    """The token after ``members``, ops not emitted yet, that follow the
    real token ``base`` (see the module doc). A chain has one next op: a
    pending token may be extended or emitted once (emitting twice returns
    the same token), never both, and only in the trace that made it. A
    pure member joining it (`extend_silently`) does not count: the token
    then stands for its successor's run."""

    __slots__ = ("base", "members", "trace", "successor", "_state", "_real")

    def __init__(self, base, members: tuple, trace):
        self.base, self.members, self.trace = base, members, trace
        self.successor = None
        self._state = "open"
        self._real = None

    def __repr__(self):
        return f"Pending({[m.target for m in self.members]})"

    def forwarded(self) -> Pending:
        """This token, or the run that pure members joined after it."""
        p = self
        while p._state == "silent":
            p = p.successor
        return p

    def latest(self) -> Pending:
        """The newest token of this chain (what its next op extends)."""
        p = self
        while p._state in ("extended", "silent") and p.successor is not None:
            p = p.successor
        return p

    def is_open(self) -> bool:
        return self._state == "open" and jx.current_trace() is self.trace

    def extend_silently(self, member: Member) -> Pending:
        """The token after ``member`` (pure) joins this open run; whoever
        holds this token holds the new one (`forwarded`)."""
        self._check_trace()
        if self._state != "open":
            raise AssertionError(f"mosaic_rt internal error: a pure member joined a closed run {self!r}")
        new = Pending(self.base, (*self.members, member), self.trace)
        self._state, self.successor = "silent", new
        return new

    def claim_for_extension(self):
        """The real token to extend from when this one was emitted already;
        None when this one is to be extended."""
        self._check_trace()
        if self._state == "emitted":
            return self._real
        if self._state == "extended":
            raise AssertionError(
                f"mosaic_rt internal error: a pending token was extended twice (its ops {self!r} would run twice)"
            )
        self._state = "extended"
        return None

    def claim_for_emission(self):
        """The real token when emitted already; None when it is to be
        emitted now (then `emitted` must be called with its token)."""
        self._check_trace()
        if self._state == "emitted":
            return self._real
        if self._state == "extended":
            raise AssertionError(
                "mosaic_rt internal error: a pending token was emitted after a"
                f" later op joined it (its ops {self!r} would run twice)"
            )
        return None

    def emitted(self, token):
        self._state, self._real = "emitted", token

    def _check_trace(self):
        if jx.current_trace() is not self.trace:
            raise AssertionError(
                "mosaic_rt internal error: a pending token crossed into another"
                f" trace (control flow must take a real token); its ops: {self!r}"
            )


def fits(members: tuple, member: Member) -> bool:
    """Whether ``member`` may join ``members`` within the native limits."""
    if member.target not in CODES or len(members) >= MAX_MEMBERS:
        return False
    if len(member.operands) + 1 > MAX_MEMBER_ARGS or len(member.results) + 1 > MAX_MEMBER_RETS:
        return False
    return sum(len(m.attrs) for m in members) + len(member.attrs) <= MAX_ATTRS


def _operand_key(x) -> Any:
    """Operands shared by members are passed once: the same traced value,
    or equal numpy constants (each op makes its own)."""
    if isinstance(x, (np.ndarray, np.generic)):
        a = np.asarray(x)
        return ("const", a.dtype.str, a.shape, a.tobytes())
    return ("value", id(x))


def encode(members: tuple):
    """``(operands, results, attrs, result_slices)`` of a batch call of
    ``members`` after the token: its operands after the token, its results
    after the token (``(shape, dtype)`` pairs), its attributes, and each
    member's slice of the results. A `Lazy` operand made by an earlier
    member is that member's result (index ``-j``: the batch's result j)."""
    operands, index = [], {}
    results, slices = [], []
    made: dict = {}  # id of a member's Lazy -> its batch result index
    ops, arg_map, ret_map, attrs = [], [], [], {}
    for k, m in enumerate(members):
        ops.append(CODES[m.target])
        token = () if m.tokenless else (0,)
        arg_map.append(len(token) + len(m.operands))
        arg_map.extend(token)
        for x in m.operands:
            if isinstance(x, Lazy) and x.value is None:
                if id(x) not in made:
                    raise AssertionError(f"mosaic_rt internal error: {x!r} is no earlier member's result")
                arg_map.append(-made[id(x)])
                continue
            if isinstance(x, Lazy):
                x = x.value
            key = _operand_key(x)
            if key not in index:
                index[key] = 1 + len(operands)
                operands.append(x)
            arg_map.append(index[key])
        ret_map.append(len(token) + len(m.results))
        ret_map.extend(token)
        slices.append(slice(len(results), len(results) + len(m.results)))
        for j, r in enumerate(m.results):
            results.append(r)
            ret_map.append(len(results))
            if m.lazy:
                made[id(m.lazy[j])] = len(results)
        for name, value in m.attrs.items():
            attrs[f"m{k:0{_MEMBER_DIGITS}d}_{name}"] = value
    attrs["ops"] = np.asarray(ops, np.int64)
    attrs["args"] = np.asarray(arg_map, np.int64)
    attrs["rets"] = np.asarray(ret_map, np.int64)
    return operands, results, attrs, slices
