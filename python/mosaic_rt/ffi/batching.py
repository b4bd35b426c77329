"""Straight-line runs of native ops, emitted as one ``batch`` call.

Each custom call costs a cold call ~0.2 ms of XLA compile inside a
shard_map (plus lowering and tracing), whatever it does. The token-threaded
ops of a kernel block that no XLA compute separates need not be separate
calls, and deferring an op with no result but the token is free: only the
next native op reads that token. So an op without results returns a
:class:`Pending` token instead of emitting anything; the next op on the
chain joins it, and the run is emitted as one ``batch`` call (see
``rust/ffi/src/ops/batch.rs``) when an op with results ends it or when the
token leaves the chain (``ffi.ops.materialize``: control flow, a block's
end, an op that cannot join).

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


@dataclasses.dataclass(frozen=True)
class Member:
    """One deferred op: its target, result ``(shape, dtype)`` pairs (the
    token's excluded), operands (the token's excluded) and attributes."""

    target: str
    results: tuple
    operands: tuple
    attrs: dict


class Pending:
    """The token after ``members``, ops not emitted yet, that follow the
    real token ``base`` (see the module doc). A chain has one next op: a
    pending token may be extended or emitted once (emitting twice returns
    the same token), never both, and only in the trace that made it."""

    __slots__ = ("base", "members", "trace", "_state", "_real")

    def __init__(self, base, members: tuple, trace):
        self.base, self.members, self.trace = base, members, trace
        self._state = "open"
        self._real = None

    def __repr__(self):
        return f"Pending({[m.target for m in self.members]})"

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
    member's slice of the results."""
    operands, index = [], {}
    results, slices = [], []
    ops, arg_map, ret_map, attrs = [], [], [], {}
    for k, m in enumerate(members):
        ops.append(CODES[m.target])
        arg_map.append(1 + len(m.operands))
        arg_map.append(0)
        for x in m.operands:
            key = _operand_key(x)
            if key not in index:
                index[key] = 1 + len(operands)
                operands.append(x)
            arg_map.append(index[key])
        ret_map.append(1 + len(m.results))
        ret_map.append(0)
        slices.append(slice(len(results), len(results) + len(m.results)))
        for r in m.results:
            results.append(r)
            ret_map.append(len(results))
        for name, value in m.attrs.items():
            attrs[f"m{k}_{name}"] = value
    attrs["ops"] = np.asarray(ops, np.int64)
    attrs["args"] = np.asarray(arg_map, np.int64)
    attrs["rets"] = np.asarray(ret_map, np.int64)
    return operands, results, attrs, slices
